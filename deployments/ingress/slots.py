"""The ingress's in-flight slots: admission against `max_in_flight`, and leases that give slots back once.

Every rollout admitted holds a slot until it ends, however it ends (finished, failed, or cancelled when its
client went away). A request takes all its slots at admission or none (429: the client retries later), as a
`Lease`; the lease gives back one slot per rollout that ends, and on `close` whatever it still holds, so a
slot can neither leak nor be given back twice.

Example:
    >>> slots = Slots(4)
    >>> lease = slots.admit(3)
    >>> slots.in_flight, lease.release(), slots.in_flight
    (3, None, 2)
    >>> lease.close(), lease.close(), slots.in_flight
    (2, 0, 0)
"""

from __future__ import annotations

__all__ = ["Lease", "Saturated", "Slots"]


class Saturated(Exception):
    """Raised when admitting a request would put more rollouts in flight than the limit."""

    def __init__(self, wanted: int, in_flight: int, limit: int) -> None:
        super().__init__(f"saturated: {in_flight} rollouts in flight, limit {limit}")
        self.wanted, self.in_flight, self.limit = wanted, in_flight, limit


class Slots:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0

    def admit(self, rollouts: int) -> Lease:
        """A lease on `rollouts` slots; raises `Saturated` if they are not all free."""
        if self.in_flight + rollouts > self.limit:
            raise Saturated(rollouts, self.in_flight, self.limit)
        self.in_flight += rollouts
        return Lease(self, rollouts)

    def __repr__(self) -> str:
        return f"Slots({self.limit!r})"


class Lease:
    """Slots one request holds."""

    def __init__(self, slots: Slots, held: int) -> None:
        self._slots = slots
        self.held = held

    def release(self) -> None:
        """One rollout ended: its slot goes back."""
        if self.held > 0:
            self.held -= 1
            self._slots.in_flight -= 1

    def close(self) -> int:
        """The request ended: every slot still held goes back; returns how many (rollouts that did not end)."""
        left, self.held = self.held, 0
        self._slots.in_flight -= left
        return left
