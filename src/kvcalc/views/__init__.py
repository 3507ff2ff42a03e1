"""Views: what each command prints, built from the API's results.

- ``estimate``, ``compare``, ``fit``, ``probe``, ``presets``: one module per command, each a
  pure function from typed results to a list of blocks (lines, notes, tables, the chart);
- ``json``: every ``--json`` dict; it and ``labels`` (the short labels both kinds share) never
  import rich, so ``--json`` starts without it;
- ``table``: fits a table to the terminal's width, rich draws it;
- ``console``: draws the blocks: width, colour and box characters for where output goes.

Nothing here is imported at start-up: a command imports the view it prints with.
"""
