"""Hot-path RESP: numpy and Python packing agree; the socket reply reader is strict."""

import os
import random
import socket
import threading

import pytest

import django_bloom
from django_bloom.engine.transport import packing
from django_bloom.exceptions import BloomError, FilterKeyMissing

np = pytest.importorskip("numpy", reason="numpy is in the test extra; this must not skip in CI")


def split_ops(payload: bytes, op: str) -> list[bytes]:
    parts = payload.split(op.encode())
    assert parts[0] == b""
    return parts[1:]


@pytest.mark.parametrize(
    "op,value,mark",
    [(packing.GET_U1, "", ""), (packing.SET_U1, packing.SET_VALUE, ""), (packing.GET_I64, "", "#")],
)
def test_numpy_and_python_packing_write_the_same_operations(op, value, mark):
    rng = random.Random(7)
    positions = [0, 9, 10, 99, 100, 2**32, 2**64 - 1] + [
        rng.randrange(10 ** rng.randrange(1, 12)) for _ in range(3000)
    ]
    slow, order = packing.bit_ops(op, positions, value, mark)
    assert order is None
    fast, order = packing.bit_ops(op, np.array(positions, dtype=np.uint64), value, mark)
    fast_ops, slow_ops = split_ops(fast, op), split_ops(slow, op)
    assert len(fast_ops) == len(positions)
    assert [fast_ops[i] for i in np.argsort(order)] == slow_ops
    assert slow_ops[3] == b"%d\r\n%s99\r\n%s" % (2 + len(mark), mark.encode(), value.encode())


@pytest.mark.parametrize(
    "positions",
    [
        [],  # nothing to pack
        [12_345_678, 10_000_000, 99_999_999],  # one width: operations stay in item order
        [0, 7, 4_294_967_295, 65_536, 1_000, 123_456_789],  # all < 2**32: the uint32 path
    ],
)
def test_numpy_packing_edge_cases_match_python(positions):
    slow, _ = packing.bit_ops(packing.SET_U1, positions, packing.SET_VALUE)
    fast, order = packing.bit_ops(
        packing.SET_U1, np.array(positions, dtype=np.uint64), packing.SET_VALUE
    )
    if len(set(len(str(p)) for p in positions)) <= 1:
        assert order is None and fast == slow
    else:
        fast_ops, slow_ops = split_ops(fast, packing.SET_U1), split_ops(slow, packing.SET_U1)
        assert [fast_ops[i] for i in np.argsort(order)] == slow_ops


def reader_for(*chunks: bytes) -> packing.ReplyReader:
    """A reader on a real socket pair, fed in pieces (as TCP may deliver them)."""
    ours, theirs = socket.socketpair()

    def feed():
        for chunk in chunks:
            theirs.sendall(chunk)
        theirs.close()

    threading.Thread(target=feed).start()
    return packing.ReplyReader(ours)


def test_reader_splits_a_bitfield_reply_delivered_in_pieces():
    body = b"*6\r\n:305419896\r\n:1\r\n:0\r\n:1\r\n:1\r\n:-42\r\n"
    reader = reader_for(*[body[i : i + 3] for i in range(0, len(body), 3)])
    head, bits, tail = reader.bitfield(1, 4, 1)
    assert head == [305419896] and bits == b"\x01\x00\x01\x01" and tail == [-42]


def test_reader_skips_a_resp3_push_before_the_reply():
    push = b">3\r\n$7\r\nMOVING!\r\n*2\r\n:1\r\n+x\r\n%1\r\n+a\r\n:2\r\n"
    reader = reader_for(push + b"*3\r\n:7\r\n:1\r\n:1\r\n")
    assert reader.bitfield(1, 2, 0) == ([7], b"\x01\x01", [])


def test_reader_turns_error_replies_into_errors():
    with pytest.raises(packing.ReplyError) as caught:
        reader_for(b"-WRONGTYPE Operation against a key\r\n").bitfield(1, 2, 0)
    assert str(caught.value).startswith("WRONGTYPE")  # redis_failure maps it by its code


@pytest.mark.parametrize(
    "body",
    [b"*3\r\n:7\r\n:10\r\n:1\r\n", b"*3\r\n:7\r\n:2\r\n:1\r\n", b"*4\r\n:7\r\n:1\r\n:1\r\n:1\r\n"],
)
def test_reader_refuses_replies_that_are_not_one_bit_per_operation(body):
    with pytest.raises(BloomError):
        reader_for(body).bitfield(1, 2, 0)


def test_reader_reports_a_closed_connection():
    with pytest.raises(ConnectionError):
        reader_for(b"*3\r\n:7\r\n").bitfield(1, 2, 0)


@pytest.mark.django_db
def test_an_error_mid_batch_leaves_no_half_read_reply_behind(redis_client):
    f = django_bloom.create_filter("pk-err", capacity=10_000, error_rate=0.01)
    f.add_many([f"a{i}" for i in range(1000)])
    redis_client.delete(f.layout.segment.keys.bits)
    redis_client.rpush(f.layout.segment.keys.bits, "not a bitmap")
    with pytest.raises(FilterKeyMissing):
        f.contains_many([f"a{i}" for i in range(1000)])  # large: the socket reader path
    redis_client.delete(f.layout.segment.keys.bits)
    f.storage.create(f.layout.segment)
    f.add_many([f"a{i}" for i in range(1000)])
    assert all(f.contains_many([f"a{i}" for i in range(1000)]))
    assert f.contains("a1") and not f.contains("never")


@pytest.mark.django_db
def test_hot_path_keeps_its_connections_instead_of_leaking_one_per_handle():
    first = django_bloom.create_filter("pk-conn", capacity=1000, error_rate=0.01)
    pool = first.storage.client.connection_pool
    first.add("warm")
    before = len(pool._in_use_connections)
    for _ in range(50):
        handle = django_bloom.get_filter("pk-conn", refresh=True)
        handle.add("x")
        handle.contains_many(["x"] * 600)
    assert len(pool._in_use_connections) <= before + 1


@pytest.mark.django_db(transaction=True)
def test_a_forked_child_never_shares_the_parents_hot_path_socket():
    f = django_bloom.create_filter("pk-fork", capacity=10_000, error_rate=0.01)
    items = [f"f{i}" for i in range(800)]
    f.add_many(items)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: hammer the filter while the parent does the same
        ok = all(all(f.contains_many(items)) and not f.contains("nope") for _ in range(30))
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    parent_ok = all(all(f.contains_many(items)) and not f.contains("nope") for _ in range(30))
    _, status = os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1" and status == 0
    assert parent_ok
