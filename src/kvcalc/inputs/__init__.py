"""Inputs: every format MODEL can name, each with one home.

- ``source``: MODEL text -> a ``Source`` that knows its format (preset, HF config, GGUF, Hub);
- ``files``: bounded reads of regular files; ``hub``: the Hub, with the one error table;
- ``weights``: weight sizes; ``presets``: the bundled presets;
- ``hf``: Hugging Face configs (reader, guard, widths, one module per family);
- ``gguf``: GGUF headers, the mapping of each llama.cpp architecture, ranged Hub reads.
"""
