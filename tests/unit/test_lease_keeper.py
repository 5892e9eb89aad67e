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


def test_a_delivery_shorter_than_one_beat_starts_no_thread_and_is_never_renewed():
    calls = []
    before = {t.ident for t in threading.enumerate() if t.name == "lease-heartbeat"}
    with LeaseKeeper(lambda: calls.append(1) or True, 0.2):
        time.sleep(0.01)
    time.sleep(0.35)  # past the first beat: the timer finds the keeper stopped
    assert calls == []
    assert {t.ident for t in threading.enumerate() if t.name == "lease-heartbeat"} <= before


def test_a_stopped_keeper_holds_nothing_of_its_delivery():
    """The timer remembers a keeper until its first beat would have been due; the delivery's row must not live
    that long with it."""
    import gc
    import weakref

    class Row:
        payload = "x" * 1000

    def renewing(held: Row):
        return lambda: held is not None

    row = Row()
    gone = weakref.ref(row)
    with LeaseKeeper(renewing(row), 30.0):
        pass
    del row
    gc.collect()
    assert gone() is None


def test_many_overlapping_keepers_each_beat_on_their_own_interval():
    """40 deliveries started 3 ms apart share the timer: every long one gets its own beats (three within a
    generous bound, so a loaded machine's scheduling cannot fail it), and a short one that ended before its
    first interval never beats."""
    counts = [0] * 40
    beaten = [threading.Event() for _ in range(40)]
    short_elapsed = [0.0] * 40

    def deliver(i: int) -> None:
        def renew() -> bool:
            counts[i] += 1
            if counts[i] >= 3:
                beaten[i].set()
            return True

        started = time.monotonic()
        with LeaseKeeper(renew, 0.2):
            if i % 2:
                beaten[i].wait(10)
            else:
                time.sleep(0.01)
                short_elapsed[i] = time.monotonic() - started

    threads = [threading.Thread(target=deliver, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
        time.sleep(0.003)
    for t in threads:
        t.join()
    time.sleep(0.3)
    assert all(beaten[i].is_set() for i in range(1, 40, 2))  # long deliveries: beats at ~0.2, 0.4, 0.6 s
    # short ones that ended within the interval (all of them, unless the machine stalled a thread): none
    assert all(counts[i] == 0 for i in range(0, 40, 2) if short_elapsed[i] < 0.2)
