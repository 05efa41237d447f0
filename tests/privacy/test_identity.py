"""Authenticated key agreement (raysampler/privacy/identity.py): each site signs its shards' X25519 keys with an
identity derived from its secret; a site that pins the other sites' identities (RAYSAMPLER_SITE_PEERS) refuses a
relayed key that no pinned identity signed, so a coordinator that replaces keys (to share a pairwise key with every
site and unmask each term) stops the run instead of reading the terms. Without pins nothing changes."""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import NamedTuple

import numpy as np
import pytest

import raysampler as rs
from raysampler.privacy import identity, secure_sum
from raysampler.runtime import binding

pytestmark = pytest.mark.usefixtures("site_keys")  # each site's secret: a key file of its own in a temporary folder
KW = dict(chains=4, num_rounds=30, burn_in=10, seed=7, executor="local", progress=False, secure_sums=True)
SITES = ("a", "b", "c", "d")


@pytest.fixture
def sited(data, monkeypatch):
    monkeypatch.delenv("RAYSAMPLER_SITE_SECRET", raising=False)
    return [dataclasses.replace(s, site=site) for s, site in zip(data, SITES)]


def _pins(sites=SITES) -> str:
    return ",".join(f"{s}={identity.identity_public(s)}" for s in sites)


def _entries() -> tuple[list[bytes], list[bytes]]:
    publics = [secure_sum.new_key_pair().public for _ in SITES]
    return publics, [identity.signed_entry(i, s, p) for i, (s, p) in enumerate(zip(SITES, publics))]


def test_the_identity_is_the_sites_secret_s(monkeypatch, sited):
    assert len({identity.identity_public(s) for s in SITES}) == 4  # a key file each: four identities
    assert identity.identity_public("a") == identity.identity_public("a")  # read again from its file
    monkeypatch.setenv("RAYSAMPLER_SITE_SECRET", "one secret")
    first = identity.identity_public("a")
    assert first == identity.identity_public("b")  # the nodes that share a secret share an identity
    monkeypatch.setenv("RAYSAMPLER_SITE_SECRET", "another")
    assert identity.identity_public("a") != first


def test_signed_keys_pass_their_pins_and_a_replaced_or_unpinned_key_is_refused(sited):
    publics, entries = _entries()
    pins = identity.pinned_peers({identity.PEERS_ENV: _pins(SITES[1:])})
    assert identity.verified_publics(entries, ["a"], pins) == publics
    assert identity.verified_publics(entries, ["a"], None) == publics  # no pins: the relay is trusted
    forged = list(entries)  # the coordinator's own key in shard 2's place, signed by an identity of its own
    mine = secure_sum.new_key_pair().public
    forged[2] = mine + identity.identity_key("mallory").sign(identity._message(2, "c", mine)) + b"c"
    with pytest.raises(identity.UnverifiedKey, match=r"shard 2: its public key is not signed by site 'c'"):
        identity.verified_publics(forged, ["a"], pins)
    relabelled = list(entries)  # shard 2's own signed key claimed for site b: the label is signed too
    relabelled[2] = entries[2][:96] + b"b"
    with pytest.raises(identity.UnverifiedKey, match="shard 2"):
        identity.verified_publics(relabelled, ["a"], pins)
    only_b = identity.pinned_peers({identity.PEERS_ENV: _pins(("b",))})
    with pytest.raises(identity.UnverifiedKey, match=r"shard 2: its key names site 'c', which RAYSAMPLER_SITE_PEERS"):
        identity.verified_publics(entries, ["a"], only_b)
    with pytest.raises(identity.UnverifiedKey, match="not a signed key"):
        identity.verified_publics([p for p in publics], ["a"], pins)


def test_sites_in_processes_of_their_own_check_each_others_pinned_keys(sited, monkeypatch):
    """One SecureSite per site, as on Ray: each checks the other sites' keys against their pins (and its own against
    its own identity), and all agree the same pairwise keys; a key the relay replaced stops every other site."""
    from raysampler.privacy.site import SecureSite

    hosts = [SecureSite([i], [s]) for i, s in enumerate(SITES)]
    entries = [h.new_keys()[0] for h in hosts]
    monkeypatch.setenv(identity.PEERS_ENV, _pins())
    for h in hosts:
        h.agree(entries)
    masks = [np.asarray(h.mask([_Reply(np.zeros(3, dtype=np.uint64))])[0].summed) for h in hosts]
    assert int(np.sum(masks, axis=0, dtype=np.uint64).max()) == 0  # the pairwise masks cancel: the keys agree
    replaced = list(entries)
    replaced[1] = secure_sum.new_key_pair().public + entries[1][32:]
    for h in (hosts[0], hosts[2], hosts[3]):
        with pytest.raises(identity.UnverifiedKey, match=r"shard 1: its public key is not signed by site 'b'"):
            h.agree(replaced)


def test_a_site_refuses_a_run_with_fewer_sites_than_it_requires(sited, monkeypatch):
    """RAYSAMPLER_SECURE_MIN_SITES: a site agrees no key in a run whose (signed) keys name fewer distinct sites, so a
    coordinator colluding with one site cannot narrow a run down to a pair that reads each other's terms."""
    from raysampler.privacy.site import SecureSite

    hosts = [SecureSite([i], [s]) for i, s in enumerate(SITES)]
    entries = [h.new_keys()[0] for h in hosts]
    monkeypatch.setenv(identity.PEERS_ENV, _pins())
    monkeypatch.setenv(identity.MIN_SITES_ENV, "4")
    hosts[0].agree(entries)  # four sites: enough
    pair = [SecureSite([0], ["a"]), SecureSite([1], ["b"])]
    two = [h.new_keys()[0] for h in pair]
    monkeypatch.setenv(identity.MIN_SITES_ENV, "3")
    with pytest.raises(
        identity.UnverifiedKey, match=r"2 site\(s\) take part .*'a', 'b'.* RAYSAMPLER_SECURE_MIN_SITES = 3"
    ):
        pair[0].agree(two)
    monkeypatch.setenv(identity.MIN_SITES_ENV, "three")
    with pytest.raises(ValueError, match="RAYSAMPLER_SECURE_MIN_SITES must be a positive integer"):
        pair[0].agree(two)


class _Reply(NamedTuple):
    summed: np.ndarray


@pytest.mark.parametrize("bad", ["b", "b=", "=AAAA", "b=not-base64!", "b=" + "A" * 8])
def test_malformed_pins_name_the_variable(bad):
    with pytest.raises(ValueError, match="RAYSAMPLER_SITE_PEERS"):
        identity.pinned_peers({identity.PEERS_ENV: bad})
    assert identity.pinned_peers({}) is None and identity.pinned_peers({identity.PEERS_ENV: " "}) is None


@pytest.mark.filterwarnings("ignore::raysampler.diagnostics.RunWarning")  # 30 rounds: the draws are compared
def test_a_pinned_secure_run_gives_the_same_draws_and_a_replaced_key_stops_it(sited, monkeypatch):
    model = rs.models.LogisticRegression(prior_scale=1.0)
    plain = rs.sample(model, sited, **KW)
    monkeypatch.setenv(identity.PEERS_ENV, _pins())
    pinned = rs.sample(model, sited, **KW)
    np.testing.assert_array_equal(pinned.draws, plain.draws)  # the keys never change a draw: the masks cancel

    relay = binding.public_keys

    def replacing(facts, config):  # a coordinator that relays its own key for shard 2
        keys = relay(facts, config)
        assert keys is not None
        keys[2] = secure_sum.new_key_pair().public + keys[2][32:]
        return keys

    monkeypatch.setattr(binding, "public_keys", replacing)
    from raysampler.runtime import construction

    monkeypatch.setattr(construction, "public_keys", replacing)
    with pytest.raises(identity.UnverifiedKey, match=r"shard 2: its public key is not signed by site 'c'"):
        rs.sample(model, sited, **KW)


def test_the_cli_prints_the_identity_the_other_sites_pin(sited, capsys):
    """`raysampler site-identity --site a` prints site a's identity as a RAYSAMPLER_SITE_PEERS entry."""
    from raysampler.cli import main

    assert main(["site-identity", "--site", "a"]) == 0
    line = capsys.readouterr().out.strip()
    assert identity.pinned_peers({identity.PEERS_ENV: line}) == {"a": base64.b64decode(identity.identity_public("a"))}
    assert main(["site-identity", "--site", "b", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"site": "b", "identity": identity.identity_public("b")}
