"""The llama.cpp side: the one module that imports llama_cpp (backend), the bounded GGUF reader,
pair checks, models.toml, model preparation and loading."""
