//! The API calls of one namespace, each with its deadline, and how their failures are sorted
//! into the crate's classes.

use super::watch::Watch;
use super::{KubeMode, LABEL_COMPUTER, LABEL_INSTANCE, LABEL_MANAGED};
use crate::{ProviderError, ProviderRef};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use serde_json::Value;
use std::time::Duration;

/// An API failure, sorted into the crate's classes.
pub(super) fn api_error(context: &str, r: Option<&ProviderRef>, e: kube::Error) -> ProviderError {
    match e {
        kube::Error::Api(status) => {
            let message = format!("{} ({}): {}", status.code, status.reason, status.message);
            match status.code {
                404 => match r {
                    Some(r) => ProviderError::NotFound(r.clone()),
                    None => ProviderError::BadSpec(format!("{context}: {message}")),
                },
                400 | 409 | 422 => ProviderError::BadSpec(format!("{context}: {message}")),
                403 if status.message.contains("exceeded quota") => {
                    ProviderError::Capacity(format!("{context}: {message}"))
                }
                401 | 403 => ProviderError::BadSpec(format!(
                    "{context}: {message} (check the provider's credentials and RBAC)"
                )),
                _ => ProviderError::Unavailable {
                    context: context.to_string(),
                    message,
                },
            }
        }
        other => ProviderError::Unavailable {
            context: context.to_string(),
            message: other.to_string(),
        },
    }
}

pub(super) fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// The deadline of one call.
pub(super) async fn timed<T>(
    limit: Duration,
    context: &str,
    f: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<Result<T, kube::Error>, ProviderError> {
    tokio::time::timeout(limit, f)
        .await
        .map_err(|_| ProviderError::Unavailable {
            context: context.to_string(),
            message: format!("the API did not answer within {} s", limit.as_secs()),
        })
}

/// The kinds of objects this provider makes.
#[derive(Clone, Copy, Debug)]
pub(super) enum Kind {
    Pod,
    Claim,
    Secret,
    Policy,
    Sandbox,
}

/// A patch that carries a token: its `Debug` never shows it.
pub(super) struct TokenPatch(pub(super) Value);

impl std::fmt::Debug for TokenPatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenPatch(***)")
    }
}

impl serde::Serialize for TokenPatch {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

/// The API calls of one namespace, each with its deadline.
#[derive(Clone)]
pub(super) struct Cluster {
    pub(super) client: kube::Client,
    pub(super) namespace: String,
    pub(super) call_timeout: Duration,
    pub(super) mode: KubeMode,
    pub(super) watch: Watch,
}

impl Cluster {
    pub(super) fn api(&self, kind: Kind) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.namespace, &resource(kind))
    }

    pub(super) async fn create(
        &self,
        kind: Kind,
        body: Value,
    ) -> Result<DynamicObject, ProviderError> {
        let name = body["metadata"]["name"].as_str().unwrap_or("").to_string();
        let context = format!("create {kind:?} {name}");
        let obj: DynamicObject = serde_json::from_value(body)
            .map_err(|e| ProviderError::BadSpec(format!("{context}: {e}")))?;
        let api = self.api(kind);
        timed(
            self.call_timeout,
            &context,
            api.create(&PostParams::default(), &obj),
        )
        .await?
        .map_err(|e| api_error(&context, None, e))
    }

    /// `GET`; `None` when the object is not there.
    pub(super) async fn get(
        &self,
        kind: Kind,
        name: &str,
    ) -> Result<Option<DynamicObject>, ProviderError> {
        let context = format!("read {kind:?} {name}");
        let api = self.api(kind);
        timed(self.call_timeout, &context, api.get_opt(name))
            .await?
            .map_err(|e| api_error(&context, None, e))
    }

    /// `DELETE` (in the background: owned objects are collected); one already gone is fine.
    pub(super) async fn delete(
        &self,
        kind: Kind,
        name: &str,
        grace: Option<u32>,
    ) -> Result<(), ProviderError> {
        let context = format!("delete {kind:?} {name}");
        let mut dp = DeleteParams::background();
        dp.grace_period_seconds = grace;
        let api = self.api(kind);
        match timed(self.call_timeout, &context, api.delete(name, &dp)).await? {
            Ok(_) => Ok(()),
            Err(e) if status_code(&e) == Some(404) => Ok(()),
            Err(e) => Err(api_error(&context, None, e)),
        }
    }

    /// A JSON merge patch; `NotFound(r)` when the object is not there.
    pub(super) async fn merge(
        &self,
        kind: Kind,
        name: &str,
        patch: TokenPatch,
        r: &ProviderRef,
    ) -> Result<(), ProviderError> {
        let context = format!("patch {kind:?} {name}");
        let api = self.api(kind);
        timed(
            self.call_timeout,
            &context,
            api.patch(name, &PatchParams::default(), &Patch::Merge(patch)),
        )
        .await?
        .map(|_| ())
        .map_err(|e| api_error(&context, Some(r), e))
    }

    /// Deletes everything of `computer` but instance `keep`: what a lost instance left.
    pub(super) async fn sweep(
        &self,
        computer: &str,
        keep: Option<&str>,
    ) -> Result<(), ProviderError> {
        let mut kinds = vec![Kind::Pod, Kind::Policy, Kind::Secret, Kind::Claim];
        if self.mode == KubeMode::Sandbox {
            kinds.insert(0, Kind::Sandbox);
        }
        let lp = ListParams::default()
            .labels(&format!("{LABEL_MANAGED}=true,{LABEL_COMPUTER}={computer}"));
        for kind in kinds {
            let context = format!("list the {kind:?}s of computer {computer}");
            let api = self.api(kind);
            let list = timed(self.call_timeout, &context, api.list(&lp))
                .await?
                .map_err(|e| api_error(&context, None, e))?;
            for obj in list.items {
                let Some(name) = obj.metadata.name.as_deref() else {
                    continue;
                };
                let instance = obj
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(LABEL_INSTANCE))
                    .map(String::as_str);
                if keep.is_some() && instance == keep {
                    continue;
                }
                if matches!(kind, Kind::Pod) {
                    self.watch.deleting(name);
                }
                self.delete(kind, name, Some(0)).await?;
            }
        }
        Ok(())
    }
}

/// The API resource of each kind.
pub(super) fn resource(kind: Kind) -> ApiResource {
    use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    match kind {
        Kind::Pod => ApiResource::erase::<Pod>(&()),
        Kind::Claim => ApiResource::erase::<PersistentVolumeClaim>(&()),
        Kind::Secret => ApiResource::erase::<Secret>(&()),
        Kind::Policy => ApiResource::erase::<NetworkPolicy>(&()),
        Kind::Sandbox => ApiResource {
            group: "agents.x-k8s.io".into(),
            version: "v1beta1".into(),
            api_version: "agents.x-k8s.io/v1beta1".into(),
            kind: "Sandbox".into(),
            plural: "sandboxes".into(),
        },
    }
}
