//! A connection's first frame: a four-letter word (answered, then the connection closes), or a
//! `ConnectRequest` (a session created or resumed by the dispatcher, or refused).

use std::net::SocketAddr;

use bytes::Bytes;
use futures::SinkExt;
use futures::StreamExt;
use jute::ClientMessage;
use jute::ConnectResponse;
use jute::ServerCodec;
use jute::ServerMessage;
use tokio_util::codec::FramedRead;
use tokio_util::codec::FramedWrite;

use super::admission::SessionKind;
use super::Port;
use super::HANDSHAKE_TIMEOUT;
use crate::dispatch::connect::Refusal;
use crate::dispatch::Caller;
use crate::dispatch::Connected;
use crate::dispatch::Session;
use crate::stats;

/// The answer to a client whose session is unknown or whose password is wrong.
fn expired_response(read_only: Option<bool>) -> ServerMessage {
    ServerMessage::Connect(ConnectResponse {
        protocol_version: 0,
        time_out: 0,
        session_id: 0,
        passwd: Bytes::from_static(&[0; 16]),
        read_only: read_only.map(|_| false),
    })
}

/// What a handshake settled: the session (new or resumed), its caller, and whether the client
/// sent the `readOnly` flag (its answer then carries one).
pub(super) struct Handshake {
    pub session: Session,
    pub caller: Caller,
    pub read_only: Option<bool>,
}

/// Reads the first frame and answers it. `None` when the connection is to close (answered
/// already where an answer is due).
/// `certified`: the subject DN of the client's verified TLS certificate.
pub(super) async fn handshake<R, W>(
    reader: &mut FramedRead<R, ServerCodec>,
    writer: &mut FramedWrite<W, ServerCodec>,
    port: &Port,
    peer: SocketAddr,
    certified: Option<&str>,
    cs: &stats::ConnStats,
) -> Option<Handshake>
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let first = match tokio::time::timeout(HANDSHAKE_TIMEOUT, reader.next()).await {
        Ok(Some(Ok(m))) => m,
        Ok(Some(Err(e))) => {
            tracing::debug!(%peer, error = %e, "bad first frame; closing");
            return None;
        }
        Ok(None) => {
            tracing::debug!(%peer, "closed before its handshake");
            return None;
        }
        Err(_) => {
            tracing::debug!(%peer, "no handshake within {HANDSHAKE_TIMEOUT:?}; closing");
            return None;
        }
    };
    let req = match first {
        ClientMessage::FourLetterWord { word, arg } => {
            port.stats.packet_received(cs);
            let text = port.words.answer(&word, arg);
            let _ = writer.send(ServerMessage::Raw(Bytes::from(text))).await;
            return None;
        }
        ClientMessage::Connect(req) => req,
        _ => {
            tracing::debug!(%peer, "first frame is not a handshake; closing");
            return None;
        }
    };
    port.stats.packet_received(cs);
    // The connection throttle (ZooKeeper's `BlueThrottle`), on the handshake as there.
    let kind = if req.session_id != 0 {
        SessionKind::Renew
    } else if port.dispatcher.config().local_sessions {
        SessionKind::Local
    } else {
        SessionKind::Global
    };
    if !port.admission.admit(kind) {
        metrics::counter!(stats::names::CONNECTIONS_REJECTED, "reason" => "connection_throttle").increment(1);
        tracing::debug!(%peer, "connection throttle: no token for a new session; closing");
        return None;
    }
    match port.dispatcher.connect(&req, peer, certified).await {
        Connected::Established(session, caller) => Some(Handshake { session, caller, read_only: req.read_only }),
        Connected::Expired => {
            let _ = writer.send(expired_response(req.read_only)).await;
            None
        }
        Connected::Refused(Refusal::NoQuorum) => {
            metrics::counter!(stats::names::CONNECTIONS_REJECTED, "reason" => "no_quorum").increment(1);
            tracing::debug!(%peer, "not serving (no quorum); closing");
            None
        }
        Connected::Refused(Refusal::ClientAhead { client, server }) => {
            tracing::info!(%peer, client, server, "client is ahead of this server; closing");
            None
        }
        Connected::Refused(Refusal::NotCreated) => None,
    }
}
