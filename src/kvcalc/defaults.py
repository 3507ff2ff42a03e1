"""The workload every command and API call assumes when none is given, in one place: a sequence
of ``DEFAULT_TOKENS`` tokens (prompt + generated). Each use says so in a note (or, in speed, as
its flags' defaults in --help).

speed times a prompt and its generation apart (TTFT, TPOT), so its workload is a prompt of
``DEFAULT_PROMPT`` and ``DEFAULT_OUTPUT`` generated tokens rather than one length.
"""

# 2,048 tokens: estimate's and compare's default since the start, and a context every model in
# the presets holds; fit (4,096) and probe (512) used their own until issue 37.
DEFAULT_TOKENS = 2048
DEFAULT_PROMPT = 1024
DEFAULT_OUTPUT = 256
