"""Model backends: the protocol, vLLM, transformers and the shipped fakes."""
