import threading
import time

from amsg.engine.lease import LeaseKeeper


def test_heartbeat_renews_until_stopped():
    calls = []
    with LeaseKeeper(lambda: calls.append(1) or True, 0.02) as keeper:
        time.sleep(0.15)
    count = len(calls)
    assert count >= 3 and not keeper.lost.is_set()
    time.sleep(0.06)
    assert len(calls) == count  # stopped in __exit__


def test_refused_renewal_marks_the_lease_lost_and_stops():
    answers = iter([True, False, True])
    calls = []

    def renew():
        calls.append(1)
        return next(answers)

    with LeaseKeeper(renew, 0.02) as keeper:
        assert keeper.lost.wait(1.0)
        time.sleep(0.08)
    assert len(calls) == 2


def test_a_failing_renewal_is_not_a_lost_lease():
    state = {"n": 0}
    done = threading.Event()

    def renew():
        state["n"] += 1
        if state["n"] == 1:
            raise TimeoutError("throttled")
        done.set()
        return True

    with LeaseKeeper(renew, 0.02) as keeper:
        assert done.wait(1.0)
    assert not keeper.lost.is_set()
