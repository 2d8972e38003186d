"""The recording server itself: dedup by key, fencing, and requests cut off by a kill."""

from __future__ import annotations

import socket
import threading

import pytest

from tests.support.fault_tools import RECORDER_ENV, post
from tests.support.recording_server import RecordingServer

pytestmark = pytest.mark.fault


def test_keyed_effects_apply_once_and_raw_calls_are_all_counted(
    recorder: RecordingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(RECORDER_ENV, recorder.url)
    answers = [post("/keyed", {"run_id": "r", "n": n}, key="r:1") for n in range(3)]
    post("/keyed", {"run_id": "s"}, key="s:1")
    post("/unkeyed", {"run_id": "r"})
    post("/unkeyed", {"run_id": "r"})
    assert [a["applied"] for a in answers] == [True, False, False]
    assert recorder.applied("/keyed") == {"r:1": {"run_id": "r", "n": 0}, "s:1": {"run_id": "s"}}
    assert recorder.raw_counts("/keyed") == {"r": 3, "s": 1}
    assert recorder.raw_counts("/unkeyed") == {"r": 2}


def test_fenced_path_refuses_lower_tokens(recorder: RecordingServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RECORDER_ENV, recorder.url)
    assert post("/fenced/w", {"fencing_token": 2}, key="k").get("status", 200) == 200
    assert post("/fenced/w", {"fencing_token": 1}, key="k")["status"] == 409
    assert post("/fenced/w", {"fencing_token": 3}, key="k").get("status", 200) == 200
    assert [c.status for c in recorder.calls("/fenced/w")] == [200, 409, 200]


def test_threads_are_counted_exactly(recorder: RecordingServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RECORDER_ENV, recorder.url)
    threads = [threading.Thread(target=post, args=("/keyed", {"run_id": "r"}, "r:1")) for _ in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    calls = recorder.calls("/keyed")
    assert len(calls) == 64 and sum(c.applied for c in calls) == 1


def test_a_request_cut_off_mid_body_has_no_effect(recorder: RecordingServer) -> None:
    host, port = recorder.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(
            b"POST /keyed HTTP/1.1\r\nHost: x\r\nIdempotency-Key: r:1\r\n"
            b'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"run_id": '
        )
    assert recorder.wait_for(lambda r: r.aborted(), 5)
    assert recorder.calls() == [] and recorder.applied("/keyed") == {}
