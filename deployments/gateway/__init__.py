"""The Gateway tier: OpenAI- and Anthropic-compatible sessions for harness agents, every call recorded."""
