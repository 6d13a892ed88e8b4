//! The one internal stop signal of the controller's tasks.

use tokio_util::sync::CancellationToken;

/// The one internal stop signal (tokio-util's `CancellationToken`): cancelled by the
/// caller (a child of its token), or by a failed admin server.
#[derive(Clone)]
pub(crate) struct Stop(CancellationToken);

impl Stop {
    /// A stop signal that also fires when `external` is cancelled.
    pub(crate) fn following(external: &CancellationToken) -> Self {
        Self(external.child_token())
    }

    /// Ask everything to stop.
    pub(crate) fn halt(&self) {
        self.0.cancel();
    }

    /// Resolves once stopping was asked.
    pub(crate) fn requested(&self) -> impl Future<Output = ()> + Send + Sync + 'static {
        self.0.clone().cancelled_owned()
    }
}
