-- 0011: network policies (docs/security.md#network-policies): a computer's own, and a workspace's
-- default for its computers that have none. `scope` is 'computer' or 'workspace', `id` the
-- computer's or workspace's id, `policy` the policy's text form (`open`, `none`,
-- `allow github.com *.pythonhosted.org:443 … deny …`). No row: the next scope's policy, and
-- last the server's default (--local-egress).

CREATE TABLE network_policies (
    scope TEXT NOT NULL,
    id TEXT NOT NULL,
    policy TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (scope, id)
);
