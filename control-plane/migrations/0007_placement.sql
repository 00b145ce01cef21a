-- 0007: where the caller asked a computer's machines to go (POST /v1/computers `placement`), in
-- its provider's terms: a docker engine's name, a Daytona region. NULL: wherever the provider
-- chooses. It is the computer's, not its machine's: every machine of it, a replacement too, is
-- asked for there first (core places a replacement elsewhere if that place is gone). Existing
-- computers have none.

ALTER TABLE computers ADD COLUMN placement TEXT;
