//! The Chrome DevTools Protocol client of the browser lifecycle: connect to a running Chrome,
//! open or navigate a tab, and close the browser cleanly (`Browser.close`, which flushes cookies
//! and the session to disk).
//!
//! Every use of `chromiumoxide` in this module tree stays in this file, behind types of our own,
//! so the client can be replaced without touching [`super::Browser`]. Every call is bounded by
//! [`COMMAND_TIMEOUT`].
//!
//! It leaves to others: finding the endpoint (Chrome's `DevToolsActivePort`, read by
//! [`super::Browser`]) and page snapshots (the snapshot module).

use std::error::Error as StdError;
use std::future::Future;
use std::time::Duration;

use chromiumoxide::cdp::browser_protocol::target::{CreateTargetParams, TargetId};
use chromiumoxide::handler::HandlerConfig;
use futures_util::StreamExt as _;
use tokio::task::JoinHandle;

/// The longest any one call here waits (connecting, a command, a page load).
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

type BoxError = Box<dyn StdError + Send + Sync>;

/// A CDP failure. The source is the client library's error, boxed so it does not leak its type.
/// [`CdpError::Connect`] means nothing was sent.
#[derive(Debug, thiserror::Error)]
pub enum CdpError {
    #[error("cannot connect to cdp at {url}")]
    Connect {
        url: String,
        #[source]
        source: BoxError,
    },
    #[error("cdp {what} failed")]
    Command {
        what: &'static str,
        #[source]
        source: BoxError,
    },
    #[error("cdp {what} took longer than {timeout:?}")]
    Timeout {
        what: &'static str,
        timeout: Duration,
    },
}

/// One websocket connection to a Chrome browser endpoint. Dropping it closes the connection;
/// Chrome keeps running.
#[derive(Debug)]
pub struct CdpSession {
    browser: chromiumoxide::Browser,
    handler: JoinHandle<()>,
}

impl CdpSession {
    /// Connects to the browser endpoint `ws_url` (`ws://127.0.0.1:<port>/devtools/browser/<id>`).
    pub async fn connect(ws_url: &str) -> Result<Self, CdpError> {
        let config = HandlerConfig {
            // Never change what a page looks like or accepts just because we connected.
            viewport: None,
            ignore_https_errors: false,
            ..HandlerConfig::default()
        };
        let connect = chromiumoxide::Browser::connect_with_config(ws_url, config);
        let connect_err = |source: BoxError| CdpError::Connect {
            url: ws_url.to_owned(),
            source,
        };
        let (browser, mut handler) = match tokio::time::timeout(COMMAND_TIMEOUT, connect).await {
            Ok(Ok(connected)) => connected,
            Ok(Err(source)) => return Err(connect_err(Box::new(source))),
            Err(_elapsed) => {
                let message = format!("no websocket handshake within {COMMAND_TIMEOUT:?}");
                return Err(connect_err(message.into()));
            }
        };
        // The handler drives the websocket; it ends when Chrome closes the connection.
        let handler = tokio::spawn(async move {
            while let Some(event) = handler.next().await {
                if let Err(error) = event {
                    tracing::debug!(%error, "cdp connection ended");
                    break;
                }
            }
        });
        Ok(Self { browser, handler })
    }

    /// Opens `url` in a new tab and waits for it to load; returns the tab's target id.
    pub async fn open_tab(&self, url: &str) -> Result<String, CdpError> {
        let page = bounded(
            "open tab",
            self.browser.new_page(CreateTargetParams::new(url)),
        )
        .await?;
        Ok(page.target_id().inner().clone())
    }

    /// Navigates the tab `target_id` to `url` and waits for the load.
    pub async fn navigate(&self, target_id: &str, url: &str) -> Result<(), CdpError> {
        let page = bounded(
            "find tab",
            self.browser.get_page(TargetId::new(target_id.to_owned())),
        )
        .await?;
        bounded("navigate", page.goto(url)).await?;
        Ok(())
    }

    /// `Browser.close`: Chrome closes every window, saves its session and cookies, and exits.
    /// Returns once Chrome acknowledged the command; the caller waits for the process.
    pub async fn close_browser(mut self) -> Result<(), CdpError> {
        bounded("Browser.close", self.browser.close()).await?;
        Ok(())
    }
}

impl Drop for CdpSession {
    fn drop(&mut self) {
        self.handler.abort();
    }
}

/// Runs a client call under [`COMMAND_TIMEOUT`], boxing its error.
async fn bounded<T, E>(
    what: &'static str,
    call: impl Future<Output = Result<T, E>>,
) -> Result<T, CdpError>
where
    E: StdError + Send + Sync + 'static,
{
    match tokio::time::timeout(COMMAND_TIMEOUT, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(source)) => Err(CdpError::Command {
            what,
            source: Box::new(source),
        }),
        Err(_elapsed) => Err(CdpError::Timeout {
            what,
            timeout: COMMAND_TIMEOUT,
        }),
    }
}
