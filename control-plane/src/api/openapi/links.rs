//! The document's OpenAPI links: which operation's answer names the resource another operation
//! takes in its path. A client generator uses them to chain calls, and schemathesis's stateful
//! phase follows them (`tests/system/openapi.rs`): it creates a process, a pool, a preview, a
//! token, a job, a service or a secret, and then calls the operations that take it, with the id
//! the answer gave, instead of an id it made up.
//!
//! One table, [`LINKS`]: a producer's operationId, and for each consumer its operationId and
//! where each of its path parameters comes from (an OpenAPI runtime expression). The unit tests
//! check every name against the route table and every parameter against the consumer's path.

use serde_json::{json, Map, Value};

/// Where a consumer's path parameter comes from.
type Param = (&'static str, &'static str);

/// The computer of the producer's own path.
const SAME_COMPUTER: Param = ("computer", "$request.path.computer");

/// One producer and the operations its answer leads to, each with its path parameters.
struct Link {
    from: &'static str,
    to: &'static [&'static str],
    params: &'static [Param],
}

const LINKS: &[Link] = &[
    Link {
        from: "computer.create",
        to: &[
            "computer.show",
            "computer.stop",
            "computer.start",
            "home.show",
            "computer.destroy",
        ],
        params: &[("computer", "$response.body#/id")],
    },
    Link {
        from: "process.start",
        to: &[
            "process.show",
            "process.logs",
            "process.attach",
            "process.kill",
        ],
        params: &[SAME_COMPUTER, ("process", "$response.body#/id")],
    },
    Link {
        from: "preview.create",
        to: &["preview.revoke"],
        params: &[SAME_COMPUTER, ("preview", "$response.body#/id")],
    },
    Link {
        from: "service.set",
        to: &["service.delete"],
        params: &[SAME_COMPUTER, ("service", "$response.body#/name")],
    },
    Link {
        from: "job.update",
        to: &["job.show", "job.release_interrupted"],
        params: &[("job", "$response.body#/id")],
    },
    Link {
        from: "job.recover",
        to: &["job.show", "job.release_interrupted"],
        params: &[("job", "$response.body#/id")],
    },
    Link {
        from: "pool.create",
        to: &["pool.show", "pool.resize", "pool.delete"],
        params: &[("pool", "$response.body#/name")],
    },
    Link {
        from: "token.create",
        to: &["token.revoke"],
        params: &[("token", "$response.body#/id")],
    },
    Link {
        from: "secret.set",
        to: &["secret.delete"],
        params: &[
            ("workspace", "$request.path.workspace"),
            ("name", "$response.body#/name"),
        ],
    },
];

/// The `links` object of `operation`'s success answer, if its answer leads anywhere.
pub(super) fn of(operation: &str) -> Option<Value> {
    let link = LINKS.iter().find(|l| l.from == operation)?;
    let mut links = Map::new();
    for to in link.to {
        let parameters: Map<String, Value> = link
            .params
            .iter()
            .map(|(name, from)| (name.to_string(), json!(from)))
            .collect();
        links.insert(
            name(to),
            json!({ "operationId": to, "parameters": parameters }),
        );
    }
    Some(Value::Object(links))
}

/// A link's name: its target's operationId in CamelCase (`process.show` → `ProcessShow`), as
/// OpenAPI names components (`^[a-zA-Z0-9.\-_]+$`).
fn name(operation: &str) -> String {
    operation
        .split(['.', '_'])
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_uppercase().chain(c).collect::<String>())
                .unwrap_or_default()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::LINKS;

    /// Every producer and consumer is a documented operation; each consumer gets exactly its
    /// path's parameters; a response expression reads a field the producer's answer requires.
    #[test]
    fn every_link_names_real_operations_and_their_whole_path() {
        let doc = super::super::document();
        let mut ops = std::collections::HashMap::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (_, op) in item.as_object().unwrap() {
                ops.insert(op["operationId"].as_str().unwrap().to_string(), (path, op));
            }
        }
        let schemas = &doc["components"]["schemas"];
        for link in LINKS {
            let (_, from) = ops
                .get(link.from)
                .unwrap_or_else(|| panic!("{}", link.from));
            let (status, ok) = from["responses"]
                .as_object()
                .unwrap()
                .iter()
                .find(|(s, _)| s.starts_with('2'))
                .unwrap();
            let links = ok["links"]
                .as_object()
                .unwrap_or_else(|| panic!("{status}"));
            assert_eq!(links.len(), link.to.len(), "{}", link.from);
            // The answer's required fields, through one `allOf` level.
            let schema = &ok["content"]["application/json"]["schema"]["$ref"];
            let name = schema.as_str().unwrap().rsplit('/').next().unwrap();
            let mut required = Vec::new();
            let mut add = |s: &serde_json::Value| {
                if let Some(r) = s["required"].as_array() {
                    required.extend(r.iter().map(|v| v.as_str().unwrap().to_string()));
                }
            };
            add(&schemas[name]);
            for part in schemas[name]["allOf"].as_array().into_iter().flatten() {
                match part["$ref"].as_str() {
                    Some(r) => add(&schemas[r.rsplit('/').next().unwrap()]),
                    None => add(part),
                }
            }
            for to in link.to {
                let (path, _) = ops.get(*to).unwrap_or_else(|| panic!("{to}"));
                let mut wanted: Vec<&str> = path
                    .split('/')
                    .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
                    .collect();
                let mut given: Vec<&str> = link.params.iter().map(|p| p.0).collect();
                wanted.sort();
                given.sort();
                assert_eq!(wanted, given, "{} -> {to}", link.from);
            }
            for (_, from) in link.params {
                if let Some(field) = from.strip_prefix("$response.body#/") {
                    assert!(
                        required.iter().any(|r| r == field),
                        "{}: {field}",
                        link.from
                    );
                }
            }
        }
    }

    #[test]
    fn link_names_are_camel_case() {
        assert_eq!(super::name("process.show"), "ProcessShow");
        assert_eq!(
            super::name("job.release_interrupted"),
            "JobReleaseInterrupted"
        );
    }
}
