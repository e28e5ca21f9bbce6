"""The artifact server over real HTTP: signed members read, everyone else gets a clear refusal that is recorded."""

import httpx
import pytest
from suite_env import HOST, MEMBER_KEY, STRANGER_KEY, named_key

from node.http_client import HttpArtifacts
from node.server import ServerThread, create_app
from protocol.auth import sign_request
from protocol.keys import KeyType
from protocol.rules.merkle import MerkleProof, verify_proof
from trainer.artifacts import ArtifactSource, ArtifactUnavailable, LocalArtifacts
from trainer.checkpoint import decode_checkpoint
from trainer.inner import EpochContext, run_epoch
from trainer.outer import GlobalState

ETH_MEMBER = named_key("member", KeyType.ETH_SECP256K1)  # Injective's default key type


@pytest.fixture(scope="module")
def work(tmp_path_factory, spec, dataset):
    root = tmp_path_factory.mktemp("host")
    ctx = EpochContext(spec.run_id(), 0, HOST, bytes(32))
    result = run_epoch(spec, dataset, ctx, GlobalState.initial(spec).params, root)
    return LocalArtifacts(root, spec.run_id(), HOST), result


@pytest.fixture(scope="module")
def server(work, spec):
    members = (MEMBER_KEY.address(), ETH_MEMBER.address())
    app = create_app(work[0], spec.run_id().hex(), HOST, authorize=lambda a: a in members)
    with ServerThread(app) as thread:
        yield thread, app


def test_member_reads_everything_and_it_verifies(server, work, spec) -> None:
    thread, _ = server
    client = HttpArtifacts(thread.url, MEMBER_KEY, spec, allow_private=True)
    _, result = work
    root = bytes.fromhex(result.commitment.checkpoint_root)
    for leaf in (0, spec.train.segments):
        ckpt = decode_checkpoint(client.checkpoint(0, leaf), spec, leaf)
        proof = MerkleProof.model_validate(client.proof(0, leaf))  # untrusted until validated
        assert verify_proof(ckpt.leaf_hash(), proof, root, spec.train.segments + 1)
    assert client.delta(0) == work[0].delta(0)
    assert client.losses(0) == work[0].losses(0)
    assert HttpArtifacts(thread.url, ETH_MEMBER, spec, allow_private=True).delta(0) == work[0].delta(0)


def test_refusals_are_clear_and_recorded(server, spec) -> None:
    thread, app = server
    with pytest.raises(ArtifactUnavailable, match=r"403.*not a bonded participant"):
        HttpArtifacts(thread.url, STRANGER_KEY, spec, allow_private=True).delta(0)
    with pytest.raises(ArtifactUnavailable, match="404"):
        HttpArtifacts(thread.url, MEMBER_KEY, spec, allow_private=True).delta(7)
    with pytest.raises(ArtifactUnavailable, match="422"):
        HttpArtifacts(thread.url, MEMBER_KEY, spec, allow_private=True).global_state("not-a-hash")
    run = spec.run_id().hex()
    unsigned = httpx.get(f"{thread.url}/v1/epochs/0/delta")
    assert unsigned.status_code == 401 and "missing header" in unsigned.json()["detail"]
    headers = sign_request(MEMBER_KEY, "GET", "/v1/epochs/0/delta", run)
    assert httpx.get(f"{thread.url}/v1/epochs/0/delta", headers=headers).status_code == 200
    replay = httpx.get(f"{thread.url}/v1/epochs/0/delta", headers=headers)
    assert replay.status_code == 401 and "replayed" in replay.json()["detail"]
    other_run = sign_request(MEMBER_KEY, "GET", "/v1/epochs/0/delta", "00" * 32)
    assert httpx.get(f"{thread.url}/v1/epochs/0/delta", headers=other_run).status_code == 401
    big = httpx.request("GET", f"{thread.url}/v1/epochs/0/delta", content=b"x" * 5000, headers=headers)
    assert big.status_code == 413
    stats = app.state.stats
    assert stats.rejected["auth"] >= 2 and stats.rejected["replay"] >= 1
    assert stats.rejected["not_member"] >= 1 and stats.rejected["oversized"] >= 1
    assert any("replayed" in r for r in stats.last_rejections)


class Oversized(ArtifactSource):
    """A lying host that answers with far more bytes than any checkpoint can have."""

    def checkpoint(self, epoch, leaf):
        return b"\0" * 50_000_000

    def proof(self, epoch, leaf):
        raise ArtifactUnavailable("no")

    delta = losses = global_state = proof


def test_client_stops_reading_oversized_answers(spec) -> None:
    app = create_app(Oversized(), spec.run_id().hex(), HOST, authorize=lambda a: True)
    with ServerThread(app) as thread, pytest.raises(ArtifactUnavailable, match=r"exceeds the limit|more than"):
        HttpArtifacts(thread.url, MEMBER_KEY, spec, allow_private=True).checkpoint(0, 1)


def test_unreachable_host_is_unavailable(spec) -> None:
    with pytest.raises(ArtifactUnavailable, match="ConnectError"):
        HttpArtifacts("http://127.0.0.1:9", MEMBER_KEY, spec, allow_private=True, retry_budget_s=1).delta(0)


def test_openapi_schema_lists_the_routes(server) -> None:
    thread, _ = server
    paths = httpx.get(f"{thread.url}/openapi.json").json()["paths"]
    assert "/v1/epochs/{epoch}/checkpoints/{leaf}" in paths and "/v1/models/{model_hash}" in paths
    assert {"/v1/epochs/{epoch}/checkpoints/{leaf}/digests",
            "/v1/epochs/{epoch}/checkpoints/{leaf}/chunks/{tensor}/{index}",
            "/v1/held/{epoch}/{checkpoint_root}/checkpoints/{leaf}/digests",
            "/v1/held/{epoch}/{checkpoint_root}/checkpoints/{leaf}/chunks/{tensor}/{index}"} <= set(paths)
    # Signed like every other route: an unsigned reader gets no digest list and no chunk.
    for path in ("/v1/epochs/0/checkpoints/1/digests", "/v1/epochs/0/checkpoints/1/chunks/0/0"):
        assert httpx.get(f"{thread.url}{path}").status_code == 401


def test_files_on_disk_are_streamed_and_other_sources_answer_bytes(server, work, spec) -> None:
    thread, _ = server
    local, _ = work
    path = local.file("checkpoint", 0, 1)
    assert path is not None and local.file("checkpoint", 0, 99) is None and local.file("model", "zz") is None
    headers = sign_request(MEMBER_KEY, "GET", "/v1/epochs/0/checkpoints/1", spec.run_id().hex())
    with httpx.stream("GET", f"{thread.url}/v1/epochs/0/checkpoints/1", headers=headers) as response:
        chunks = list(response.iter_raw())
        # FileResponse: the file's size up front, an ETag, and the body read from disk chunk by chunk.
        assert response.status_code == 200 and "etag" in response.headers
        assert int(response.headers["content-length"]) == path.stat().st_size
    assert b"".join(chunks) == path.read_bytes() == local.checkpoint(0, 1)
    # A wrapper has no file (the default), so what it transforms is what is served.
    assert Oversized().file("checkpoint", 0, 1) is None
