"""A worker process's side of secure sums (`runtime.host.ShardHost` holds one in a secure-sums run): its shards'
key pairs and their mask streams (`secure_sum.MaskStream`, read on at every step); their captured states are sealed
by the host (`sealing.SiteSeals`).

Everything secret stays here: the coordinator sees the public keys (which it relays), the masked replies and the
sealed states. Key agreement runs at each `describe` (a run's start, and each resume: the run resumes with new keys,
so streams read from their start again never repeat a mask) and completes with the public keys the coordinator relays
in the next call that reaches the workers (`init_states`, or `restore` on a resume), so it costs no round trip.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from . import identity, secure_sum


class SecureSite:
    """The secure-sums state of one worker process's shards (`shard_ids`, global shard ids = party ids; `sites`
    their site labels)."""

    def __init__(self, shard_ids: Sequence[int], sites: Sequence[str | None]) -> None:
        self.shard_ids = [int(i) for i in shard_ids]
        self.sites = list(sites)
        self._pairs: list[secure_sum.KeyPair] = []
        self._masks: list[secure_sum.MaskStream] | None = None
        self.steps = 0  # steps masked since the last key agreement

    def new_keys(self) -> list[bytes]:
        """Fresh key pairs for this process's shards (the agreement's first half): their public keys, each signed by
        its site's identity (`identity.signed_entry`), in order."""
        self._pairs = [secure_sum.new_key_pair() for _ in self.shard_ids]
        self._masks = None
        return [identity.signed_entry(i, s, p.public) for i, s, p in zip(self.shard_ids, self.sites, self._pairs)]

    def agree(self, entries: Sequence[bytes]) -> None:
        """The agreement's second half: pairwise keys from every shard's relayed key entry (in shard order), each
        checked against its site's pinned identity where this site pins its peers (`identity.verified_publics`),
        and against the least number of sites it takes part with (`identity.check_min_sites`); an
        `identity.UnverifiedKey` otherwise, before any key is agreed."""
        if not self._pairs:
            raise RuntimeError("secure sums: no key pair to agree with (describe() makes them)")
        try:
            publics = identity.verified_publics(entries, self.sites, identity.pinned_peers())
            identity.check_min_sites(entries)
        except identity.UnverifiedKey as exc:  # say which site refused: the one whose pins or minimum to look at
            here = ", ".join(sorted({repr(s) for s in self.sites}))
            raise identity.UnverifiedKey(f"site {here} refused the run's keys: {exc}") from None
        keys = [secure_sum.agree(p, i, publics) for p, i in zip(self._pairs, self.shard_ids)]
        self._masks = [secure_sum.MaskStream(k) for k in keys]
        self.steps = 0

    def mask(self, replies: Any) -> Any:
        """The step's replies with each shard's `summed` term masked: one reply per shard (a list), or one block
        whose `summed` stacks this process's shards along its first axis. Reads on every mask stream."""
        if self._masks is None:
            raise RuntimeError("secure sums: a step before key agreement")
        self.steps += 1
        if isinstance(replies, list):
            return [r._replace(summed=m.masked(r.summed)) for r, m in zip(replies, self._masks)]
        summed = np.asarray(replies.summed, dtype=np.uint64)
        out = np.empty_like(summed)
        for j, m in enumerate(self._masks):
            out[j] = m.masked(summed[j])
        return replies._replace(summed=out)
