"""edgespec_tui: the Textual chat app for edgespec (installed under this import name)."""
