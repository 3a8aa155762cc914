"""Frontends over the public API: the CLI, the HTTP server, the bench; `options` is what they share."""
