"""What the test modules share, in one place: no test module imports another test module.

- ``paths``: the repository's folders (the root, ``src/kvcalc``, ``tests/fixtures``), whatever folder
  a test module sits in.
- ``gguf_files``: GGUF files written with the gguf package (the one llama.cpp's converter uses), from
  plain values or from keys with their GGUF value types, and the metadata every file carries.
- ``gguf_models``: small models of llama.cpp architectures as convert_hf_to_gguf.py writes them
  (the keys of each converter, tiny geometries, files with NextN blocks).
- ``llama_cpp``: the real llama.cpp, run through the probe's child process, and what it measured
  set beside kvcalc's estimate.
- ``vllm_server``: the real vLLM OpenAI server on 127.0.0.1 on a tiny random-weight Llama (a context
  manager; skips without vLLM's Python), for tests that read a live server.
- ``fake_hub``: a fake Hugging Face Hub on 127.0.0.1 (the ``hub`` and ``ranged`` fixtures).
- ``hub_cache``: a pre-populated, offline Hugging Face cache (the ``hub_env`` fixture).
- ``cwd``: the two ``here`` fixtures (run in tmp_path; a relative or an absolute name), imported by the
  modules that use one.
- ``commands``, ``local_files``: command-line tails, a named-pipe marker, a subprocess timeout and a folder
  holding a real config.json, shared by the input tests.
- ``step_log``: a scheduler run one stub second a step, with what each step fed (the engines'
  scheduler tests).
- ``hybrid_families``, ``sparse_families``, ``mimo_qwen_families``, ``nemotron_families``: what the family
  test modules split from one file still share.

The fixtures are made available to every test by tests/conftest.py; the rest is imported by name.
"""
