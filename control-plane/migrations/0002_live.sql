-- 0002: live screens and takeover (docs/security.md#capability-urls,
-- docs/lifecycle.md#takeover), one row per (computer, bot).
--
-- screen_generation bumps when the bot's desktop is released or torn down: every capability URL
-- sealed with an older value stops opening, and open streams close at their next re-check.
-- control_id / control_expires_at: the user's control lease ("take control"); NULL id = none.
-- waiting_takeover: the execution lease (`<owner>:<fence>`) of a run that asked for protected
-- input; it allows a takeover only while that exact lease is still the live one.

CREATE TABLE live_bots (
    computer_id TEXT NOT NULL,
    bot TEXT NOT NULL,
    screen_generation BIGINT NOT NULL DEFAULT 0,
    control_id TEXT NULL,
    control_expires_at BIGINT NOT NULL DEFAULT 0,
    waiting_takeover TEXT NULL,
    PRIMARY KEY (computer_id, bot)
);
