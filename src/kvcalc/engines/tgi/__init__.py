"""Hugging Face text-generation-inference (TGI), read but not modelled: ``kvcalc check`` reads a TGI
server's /info and /metrics and its start-up log (observe.py), and kvcalc has no rules of its own for
TGI's cache, so TGI is no engine in the registry and ``estimate --engine tgi`` does not exist.

Why not modelled: TGI sizes its pool from the memory its warm-up leaves free (flash_causal_lm.py
``warmup``: free memory x cuda_memory_fraction x TGI_WIGGLE_ROOM over the bytes of one block, the
block size set by the attention back end: flashinfer 1, flashdecoding 256, paged 16 tokens,
models/globals.py), across several back ends (CUDA, ROCm, Gaudi, Neuron, the llama.cpp and TensorRT
ones) whose allocators kvcalc has not measured; and TGI is in maintenance mode (README.md at
v3.3.7, December 2025). What ``check`` can do is set the pool TGI reports, in tokens, beside the theoretical
bytes per token of the same model: that comparison needs no TGI rules.
"""
