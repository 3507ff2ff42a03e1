"""The pure arithmetic: no I/O, nothing printed, no engine named.

``estimate`` (bytes of a workload), ``fit`` (a budget inverted into tokens, requests, context),
``compare`` (variants and models side by side), ``requests`` (request mixes), ``speed`` (time
bounds from bytes and FLOPs), ``runtime`` (what an engine takes from a GPU: terms and ranges),
``offload`` (llama.cpp layers on GPUs and the CPU).
"""
