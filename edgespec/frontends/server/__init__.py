"""`edgespec serve`: a local OpenAI-compatible endpoint."""
