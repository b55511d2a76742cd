"""Speculative decoding: the engine loop, the draft tree, the draft heads, NanoSpec's candidate stream, drafters (EAGLE head, draft model, context) and their verification."""
