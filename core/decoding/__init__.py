"""Speculative decoding: the engine loop (engine.py), the draft tree and its verification (tree.py), the draft LM
heads (heads.py), NanoSpec's candidate stream (stream.py), the drafters (draft.py: a draft model; eagle.py: an EAGLE
head; context.py: prompt lookup) and the contracts between them (protocols.py)."""
