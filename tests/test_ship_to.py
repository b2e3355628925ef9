"""`dhp.claim(..., ship_to=...)`: a worker's checkpoints reach a peer as they are made, and a
standby on the peer's own store (no shared store) resumes from the last one."""

import dhp
import pytest

SECRET = "ship-to-test-secret-0123456789abcdef"
SCHEMA = {"type": "object", "required": ["pages"]}


@pytest.mark.covers("DHP-TRN-025")
@pytest.mark.parametrize("kind", ["net", "file"])
def test_every_checkpoint_is_shipped_and_a_peer_standby_resumes(tmp_path, kind):
    host_a = dhp.Store(tmp_path / "a")
    hid = dhp.dispatch(host_a, task_kind="pages", inputs={"n": 5}, output_schema=SCHEMA)
    if kind == "net":
        server = dhp.TransportServer(tmp_path / "b", port=0, secret=SECRET).start()
        shipper = dhp.NetShipper("127.0.0.1", server.port, secret=SECRET,
                                 local_logpath=tmp_path / "buffer")
    else:
        shipper = dhp.FileShipper(tmp_path / "shared")
    with dhp.claim(host_a, hid, "w1", ship_to=shipper) as ctx:
        for page in range(1, 4):
            ctx.checkpoint({"page": page})
    if kind == "net":
        assert shipper.flush(timeout=10), shipper.last_error
        shipper.close()
        server.stop()
    else:
        dhp.ingest_folder(dhp.Store(tmp_path / "b"), tmp_path / "shared")

    host_b = dhp.Store(tmp_path / "b")
    assert [r["seq"] for r in dhp.checkpoints(host_b, hid)] == [1, 2, 3]
    assert dhp.checkpoints(host_b, hid) == dhp.checkpoints(host_a, hid)
    with dhp.recover(host_b, hid, "w2") as ctx:
        assert ctx.last_checkpoint == {"page": 3}
        assert ctx.fence > 1
        ctx.complete({"pages": 5})
    assert dhp.result(host_b, hid) == {"pages": 5}
