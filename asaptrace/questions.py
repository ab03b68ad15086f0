"""The question each what-if answers, in the words every face prints beside its numbers (DOMAIN.md §7, §8).

One definition, a leaf, so that the what-ifs' JSON (``question``) and the views' titles read it (and
``asaptrace ingest``, whose views import it, loads no replay module): the
offline replay, the online serving of a store's lengths and the paper's sweep answer different
questions, and their numbers disagree for that reason (docs/analyses/advise.md, "Three questions").
"""

from __future__ import annotations

#: ``asaptrace replay``, advise's offline columns: the store's own batches at their measured ready times
REPLAY_QUESTION = "these batches as they arrived"
#: ``advise --online``, a sweep of a store's lengths: a steady stream resampled from the store
ONLINE_QUESTION = "served under load, your lengths"
#: ``asaptrace sweep`` with its defaults: the paper's costs, length profile and arrivals
PAPER_QUESTION = "the paper's scenario"
