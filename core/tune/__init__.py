"""Tune my setup: make a user's own server faster, unattended, verified and reversible.

``specdeck tune`` and the Tune page run the same steps, each a function here:

1. :mod:`.setup` reads what the user runs: a llama-swap model's cmd, a llama-server binary
   with its GGUF and flags, or the embedded demo; the target's facts from its GGUF header.
2. :mod:`.candidates` lists what this server can draft with: the ``--spec-type`` values its
   own ``--help`` lists (n-gram types, a draft model, MTP where the target has MTP layers)
   and draft GGUFs on disk that pass the compatibility check against the target; each with
   the settings worth searching. :mod:`.hub` adds drafts from the Hub (tokenizer checked from
   the GGUF header before any download), which :mod:`.run` downloads within the download
   budget, asking first, before the time budget starts.
3. :mod:`.predict` gives each candidate a predicted speed-up with a range, before anything
   runs, from this machine's A/B history of the same pair and else from the theory.
4. :mod:`.run` searches candidates x settings on the tuning prompts with successive halving
   under the time budget (``core.bench.grid``), then verifies the winner on held-out prompts
   against the current setting and against no drafting, with the losslessness check.
5. :mod:`.apply` writes a verified winner through the existing editor (llama-swap's cmd:
   diff, .bak, atomic), starts llama-server from the file as written and checks it drafts and
   answers; a winner whose 95% interval does not lie above 1.0, or whose output changed, is
   never written, and a relaunch that fails rolls the file back.
6. :mod:`.report` writes the result: before/after, every setting tried, predicted against
   measured, time per phase.
"""
