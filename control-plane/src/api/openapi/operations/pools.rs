//! What the document says about the warm pool routes (docs/pools.md).

use super::super::{json_body, json_ok, Doc};
use super::{op, Operation, JSON_BODY};
use crate::route::Endpoint;
use crate::schema::code::ApiCode::*;
use crate::schema::pool::{CreatePool, Pool, PoolDeleted, PoolList, ResizePool};

/// The operation of pool route `e` (`None`: not a pool route).
pub(super) fn describe(e: Endpoint, doc: &mut Doc) -> Option<Operation> {
    Some(match e {
        Endpoint::CreatePool => op(
            "pools",
            "Make a warm pool: `size` computers kept booted on a provider, guest connected (and, \
             with `desktop`, a desktop and Chrome up), unassigned, for creates that name the \
             pool. They are booted in the background; a member that is lost is replaced.",
            (201, json_ok("The pool, made.", doc.of::<Pool>())),
            [JSON_BODY, &[Exists]].concat(),
        )
        .body(json_body(doc.of::<CreatePool>(), true)),
        Endpoint::ListPools => op(
            "pools",
            "The warm pools and their unassigned members.",
            (200, json_ok("The pools.", doc.of::<PoolList>())),
            vec![],
        ),
        Endpoint::GetPool => op(
            "pools",
            "A warm pool and its unassigned members.",
            (200, json_ok("The pool.", doc.of::<Pool>())),
            vec![PoolNotFound],
        ),
        Endpoint::ResizePool => op(
            "pools",
            "Change a warm pool's size: missing members are booted, members beyond it destroyed.",
            (200, json_ok("The pool.", doc.of::<Pool>())),
            [JSON_BODY, &[PoolNotFound]].concat(),
        )
        .body(json_body(doc.of::<ResizePool>(), true)),
        Endpoint::DeletePool => op(
            "pools",
            "Delete a warm pool and destroy its unassigned members (computers handed out from \
             it stay).",
            (200, json_ok("The pool, deleted.", doc.of::<PoolDeleted>())),
            vec![PoolNotFound],
        ),
        _ => return None,
    })
}
