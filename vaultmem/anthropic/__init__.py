"""The Anthropic SDK side: the memory tool classes the tool runner calls, and
the request helpers for an agent."""
