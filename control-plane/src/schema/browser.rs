//! `POST /v1/computers/{id}/browser/{bot}/navigate|snapshot|act`: the page tools
//! (docs/screens.md#page-browser). A browser_act that fails after validation is an answer, not
//! an HTTP error: [`PageResult::Failed`].

use serde::{Deserialize, Serialize};

/// The body of every page tool: the lease, plus `url` (navigate) or `steps` (act).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PageRequest {
    pub lease: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<Vec<Step>>,
}

/// One browser_act step; `ref` names an element of the last snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum Step {
    Click {
        #[serde(rename = "ref")]
        element: String,
    },
    Fill {
        #[serde(rename = "ref")]
        element: String,
        text: String,
        /// A saved login's origin: the fill runs only on that HTTPS origin.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        origin: Option<String>,
    },
    Type {
        #[serde(rename = "ref")]
        element: String,
        text: String,
    },
    Select {
        #[serde(rename = "ref")]
        element: String,
        value: String,
    },
    Press {
        key: String,
    },
}

/// browser_snapshot's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Snapshot {
    pub url: String,
    pub title: String,
    pub elements: Vec<Element>,
    /// Visible text, then one line per element.
    pub tree: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Element {
    #[serde(rename = "ref")]
    pub element: String,
    pub role: String,
    pub name: String,
    /// Empty for password fields and fields filled from saved logins.
    pub value: String,
    pub tag: String,
}

/// The answer of every page tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum PageResult {
    Done(PageDone),
    Failed(PageFailed),
}

impl PageResult {
    /// Whether the tool did what it was asked.
    pub fn ok(&self) -> bool {
        match self {
            Self::Done(d) => d.ok,
            Self::Failed(f) => f.ok,
        }
    }
}

/// The page after the tool ran: `ok: true`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PageDone {
    pub ok: bool,
    pub snapshot: Snapshot,
    /// act: steps completed (all of them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed: Option<usize>,
}

/// A browser_act that failed after validation: `ok: false`. Nothing is replayed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PageFailed {
    pub ok: bool,
    /// Steps confirmed before the failure.
    pub completed: u32,
    /// Whether the failing step may have acted.
    pub uncertain: bool,
    pub error: String,
    /// `computer_act`.
    pub fallback: String,
}
