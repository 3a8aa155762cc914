"""`edgespec bench`: side-by-side speed against llama.cpp, in one run on one machine."""
