-- 0005: idle suspension (docs/lifecycle.md#idle-suspension), two columns on the computer row.
--
-- idle_active_at: when the computer was last used, in milliseconds since the epoch: an API
-- operation on it began or ended, a run released its lease, a user took or released control, or
-- it booted. A running computer with nothing live on it is suspended (checkpointed, then
-- stopped) once idle_active_at is older than the idle timeout. It lives on the row, not in
-- memory, so a restart of the control plane neither forgets a computer's idleness nor suspends
-- a computer that was just used.
--
-- idle_awake_until: a run asked for a takeover (waiting_takeover) on a provider that does not
-- bill while running: the computer stays awake at least until then
-- (docs/lifecycle.md#takeover: 30 minutes after the request), even though that run's lease no
-- longer keeps it awake. 0: no such window.
--
-- Existing computers count as used when they last changed, so upgrading suspends nothing at once.

ALTER TABLE computers ADD COLUMN idle_active_at BIGINT NOT NULL DEFAULT 0;
ALTER TABLE computers ADD COLUMN idle_awake_until BIGINT NOT NULL DEFAULT 0;
UPDATE computers SET idle_active_at = updated_at;
