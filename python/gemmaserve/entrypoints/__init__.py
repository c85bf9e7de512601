"""Entry points with vLLM's module paths."""
