"""Predict every drafting setting from one plain run (docs/tune.md, "Replay").

With greedy verification what a drafter gets accepted is a function of the target's own
output. One run without drafting, kept as token ids (:mod:`.capture`), replayed through
llama-server's own n-gram algorithms (:mod:`.drafters`, in the server's step loop and slot
order: :mod:`.session`) gives, for every setting of every n-gram type (:mod:`.settings`),
the exact drafts, verifications and accepted tokens by position that the server would count;
:mod:`.proof` holds a replay against a real server's counters.
"""
