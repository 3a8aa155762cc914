"""The pure decoding core: sampling, verification, the decoder loop, the K controller, text and events.

No model, no I/O beyond the clock; numpy only, with an injected RNG."""
