"""Predict every drafting setting from one plain run (docs/tune.md, step 5 "Replay").

With greedy verification what a drafter gets accepted is a function of the target's own
output. One run without drafting, kept as token ids (:mod:`.capture`), replayed through
llama-server's own n-gram algorithms (:mod:`.drafters`, in the server's step loop and slot
order: :mod:`.session`) gives, for every setting of every n-gram type (:mod:`.settings`),
the exact drafts, verifications and accepted tokens by position that the server would count
(:mod:`.proof` holds a replay against a real server's counters); a draft model's
teacher-forced pass does the same for every k and p_min (:mod:`.draft_model`). What each step
costs on the user's server comes from a short calibration (:mod:`.costs`), and with it each
setting's predicted speed-up and interval. :mod:`.phase` runs all of it for a tune, and
:mod:`.search` says what the tune then measures: the best predicted, never deciding alone.
"""
