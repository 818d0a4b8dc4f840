"""Models: the base-model fetch, role prompts, and rollout engines (transformers; vLLM lazily)."""
