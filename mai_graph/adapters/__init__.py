"""The graph behind other doors: LangChain, LangGraph Studio, the OpenAI-compatible endpoint.

Adapters depend on the core (:func:`~mai_graph.graph.create_mai_graph`, :func:`~mai_graph.api.run`)
and translate; the core never imports them.

- :mod:`~mai_graph.adapters.langchain`: ``MAIChatModel`` and ``create_mai_chat_graph``.
- :mod:`~mai_graph.adapters.decisions`: ``MAIDecisionModel`` (choice questions for agents).
- :mod:`~mai_graph.adapters.studio`: the graphs ``langgraph.json`` names for ``langgraph dev``.
- :mod:`~mai_graph.adapters.endpoint`: ``mai-graph serve``, OpenAI's chat-completions API.
"""
