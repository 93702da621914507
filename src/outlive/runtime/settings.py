"""Runtime knobs, with the defaults of docs/architecture.md §5."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_CONCURRENCY", "RuntimeSettings"]

DEFAULT_CONCURRENCY = 200
"""Sessions one worker runs at once. A run mostly waits on its model's stream, so a process
carries hundreds; its writes are grouped into one transaction per flush window, and claims
pause while the database falls behind (see docs/deploy.md for sizing)."""


@dataclass(frozen=True)
class RuntimeSettings:
    lease_ttl: float = 10.0
    heartbeat_interval: float = 2.0
    """Must be shorter than `lease_ttl`; `for_ttl` picks one that is."""
    backstop_interval: float | None = 1.0
    """Seconds between claim scans when no wakeup came; None turns the scan off (tests)."""
    concurrency: int = DEFAULT_CONCURRENCY
    max_attempts: int = 5
    grace: float = 10.0
    """On shutdown, how long runs may go on before they are parked for another worker."""
    group_commit: bool = True
    """The writes of all runs ready together go in one transaction (`group_commit.py`)."""
    max_write_lag: float = 1.0
    """Seconds a write may wait for the database before the worker stops claiming new
    sessions until it catches up (back-pressure)."""
    flush_interval: float = 0.05
    """Seconds from the end of a run's last flush of streamed output to its next, rounded up
    to the 5 ms grid on which every run's flush waits share timers (`activity.FLUSH_GRID`)."""
    flush_bytes: int = 1024
    buffer_bytes: int = 256 * 1024
    """Model output a run holds unwritten before it stops reading its model's stream until
    the database catches up: back-pressure to the provider, bounded memory per run."""
    provider_retries: int = 3
    retry_base: float = 0.5
    retry_max: float = 8.0
    abandon_check_interval: float = 5.0
    stall_timeout: float = 90.0
    """A model stream that yields nothing (no token, no tool call) for this long is aborted
    and counts as a transient provider error: retried within `provider_retries`."""
    turn_timeout: float = 900.0
    context_threshold: float = 0.8
    """Compact the model's view before a call that would pass this share of the model's
    context window (an agent's `compact_at` overrides it; docs/context.md)."""
    """Wall-clock cap on a turn's model call, retries and backoff included; past it the run
    settles `failed` (`provider_error`)."""
    sweep_interval: float | None = 30.0
    """Seconds between storage sweeps (purge, retention, compaction, owner log; see
    docs/retention.md); None turns the sweep off."""
    compact_after: float | None = 300.0
    """A finished session's deltas are compacted this long after it ended; None: never."""
    retain: float | None = None
    """Sessions that ended this long ago are purged whole; None (default): kept forever."""
    owner_log_keep: int = 10_000
    """Each owner's lifecycle log keeps its last this many events."""
    approval_ttl: float = 86400.0
    """Seconds a person has to decide on a tool call before it is denied as `expired`."""
    sweep_batch: int = 50
    """Sessions per purge or compaction batch (each batch is one short transaction)."""
    webhooks: bool = True
    """Deliver webhooks from the outbox (docs/webhooks.md)."""
    webhook_interval: float = 1.0
    """Seconds between outbox scans when the last one found less than a batch."""
    webhook_timeout: float = 10.0
    """Seconds a receiver has to answer one delivery."""
    webhook_backoff: float = 5.0
    """Delay before the first retry; doubled after each failed attempt, up to the cap."""
    webhook_backoff_max: float = 3600.0
    webhook_attempts: int = 12
    """Attempts before a delivery is given up (`failed` in the delivery log)."""
    allow_private_webhooks: bool = False
    """Deliver to loopback, private and link-local addresses too (tests, closed networks)."""
    schedules: bool = True
    """Run the firing loop: scheduled messages and schedules (docs/schedules.md)."""
    fire_interval: float = 0.5
    """Seconds between firing passes when the last one found less than a batch."""
    fire_batch: int = 500
    """Due messages and due schedules one firing pass takes at most (one transaction): 1,000
    schedules due at once are two passes, shared by two workers (bench/schedule_bench.py)."""
    schedule_grace: float = 60.0
    """A fire due longer ago than this when a pass first sees it was missed while no worker
    ran: its schedule's `catch_up` decides; younger ones are late and fire."""
    wakeups_per_session: int = 10
    """Wake-ups a session may have waiting (`schedule_wakeup` fails past it)."""
    wakeup_horizon: float = 7 * 86400.0
    """How far ahead a wake-up may be asked for, in seconds."""

    @staticmethod
    def heartbeat_for(lease_ttl: float) -> float:
        """The default beat for a TTL: 2 s, or a quarter of a shorter TTL."""
        return min(2.0, lease_ttl / 4)

    def __post_init__(self) -> None:
        if self.heartbeat_interval >= self.lease_ttl:
            raise ValueError("heartbeat_interval must be shorter than lease_ttl")
        if self.owner_log_keep < 1000:
            raise ValueError("owner_log_keep must be at least 1000 (streams resync beyond it)")
        if self.sweep_batch < 1:
            raise ValueError("sweep_batch must be at least 1")
        if not self.approval_ttl > 0:
            raise ValueError("approval_ttl must be positive")
        if self.webhook_attempts < 1 or not self.webhook_timeout > 0:
            raise ValueError("webhook_attempts must be at least 1, webhook_timeout positive")
        if not (self.fire_interval > 0 and self.fire_batch >= 1 and self.schedule_grace >= 0):
            raise ValueError("fire_interval and fire_batch must be positive, schedule_grace not "
                             "negative")
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if not (self.stall_timeout > 0 and self.turn_timeout > 0):
            raise ValueError("stall_timeout and turn_timeout must be positive")
