"""Evaluation: how much accuracy MAI keeps, at what share of large-model work, at what latency.

- :func:`load_dataset` reads local files (mai-graph JSONL, MMBench TSV, POPE, ChartQA);
  :func:`circular_variants` rotates multiple-choice options for MMBench's CircularEval.
- :func:`run_eval` / :func:`arun_eval` run policies over a dataset and record every
  generation in an append-only ``records.jsonl`` (resumable).
- :func:`build_report` / :func:`write_report` compute accuracy, latency, tokens, routes and
  cost-quality metrics from the records; :func:`calibrate` picks gate settings offline.
- :func:`make_synthetic` draws an offline dataset; :func:`simulated_pair` answers it at set
  accuracies, to validate the harness.

The command line is ``mai-graph eval``, ``mai-graph calibrate`` and ``mai-graph synth-data``.
"""

from mai_graph.eval.calibrate import CalibrationResult, Setting, calibrate, context_file
from mai_graph.eval.circular import circular_variants
from mai_graph.eval.datasets import Dataset, RowProblem, Sample, load_dataset
from mai_graph.eval.records import RecordSet, read_records
from mai_graph.eval.replay import Outcome, outcome, replay
from mai_graph.eval.report import build_report, format_table, write_report
from mai_graph.eval.runner import POLICIES, RunSummary, arun_eval, run_eval
from mai_graph.eval.scorers import pope_metrics, score, vqa_accuracy
from mai_graph.eval.simulate import SimConfig, expected, simulated_pair
from mai_graph.eval.synthetic import make_synthetic

__all__ = [
    "POLICIES",
    "CalibrationResult",
    "Dataset",
    "Outcome",
    "RecordSet",
    "RowProblem",
    "RunSummary",
    "Sample",
    "Setting",
    "SimConfig",
    "arun_eval",
    "build_report",
    "calibrate",
    "circular_variants",
    "context_file",
    "expected",
    "format_table",
    "load_dataset",
    "make_synthetic",
    "outcome",
    "pope_metrics",
    "read_records",
    "replay",
    "run_eval",
    "score",
    "simulated_pair",
    "vqa_accuracy",
    "write_report",
]
