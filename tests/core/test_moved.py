"""Old import paths keep working (mai_graph/_moved.py): every public name, and the real
module's own identity."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

# The public names (``__all__``) each old module had when it moved: read from the repository's
# history (the parent of the commit that deleted the file, 24ab221), the names that stopped
# resolving after its parts went to several homes.
OLD_NAMES = {
    "mai_graph.images": ["image_ref"],
    "mai_graph.media": ["DEFAULT_MM_LIMITS", "check_backends", "check_image_count",
                        "check_media", "check_media_counts", "check_mm_limits", "VideoRef"],
    "mai_graph.profile": ["register"],
    "mai_graph.backends.select": ["add_backend_flags", "backends_from_args",
                                  "lineup_from_args", "backends_for"],
}  # fmt: skip


def _fresh(code: str) -> str:
    """Run ``code`` in a fresh interpreter (an import's side effects stay there)."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)  # fmt: skip
    return out.stdout.strip()


@pytest.mark.parametrize(("old", "names"), OLD_NAMES.items())
def test_every_old_public_name_resolves(old, names):
    module = importlib.import_module(old)
    for name in names:
        assert getattr(module, name) is not None, f"{old}.{name}"
    with pytest.raises(AttributeError, match="moved to"):
        module.no_such_name  # noqa: B018


def test_every_alias_imports():
    from mai_graph._moved import MOVED, SPLIT

    for old in [*MOVED, *SPLIT]:
        assert importlib.import_module(old) is not None, old


@pytest.mark.slow
def test_importing_an_alias_leaves_the_real_module_its_own_spec():
    code = (
        "import mai_graph.serve as old, mai_graph.adapters.endpoint as new, "
        "mai_graph.requests, mai_graph.calls as calls; "
        "print(old is new, new.__spec__.name, calls.__spec__.name)"
    )
    assert _fresh(code) == "True mai_graph.adapters.endpoint mai_graph.calls"


def test_a_moved_name_is_the_same_object():
    from mai_graph.backends.select import lineup_from_args
    from mai_graph.cli.backends import lineup_from_args as home

    assert lineup_from_args is home


def test_a_moved_package_and_its_modules_are_the_new_ones():
    """engines/ became deploy/: the old package and each of its modules are the same objects."""
    out = _fresh(
        "import sys, mai_graph\n"
        "import mai_graph.engines.spec as old_spec, mai_graph.deploy.spec as spec\n"
        "from mai_graph.engines import LineupSpec, build_lineup\n"
        "from mai_graph.engines.plan import plan_memory\n"
        "import mai_graph.deploy as deploy, mai_graph.deploy.plan as plan\n"
        "assert old_spec is spec and LineupSpec is spec.LineupSpec\n"
        "assert build_lineup is deploy.build_lineup and plan_memory is plan.plan_memory\n"
        "assert spec.__spec__.name == 'mai_graph.deploy.spec'\n"
        "copies = [m for m in sys.modules.values() if getattr(m, '__file__', None)\n"
        "          and m.__file__.endswith(('deploy/spec.py', 'deploy/plan.py'))]\n"
        "print(len({id(m) for m in copies}))"
    )
    assert out == "2"
