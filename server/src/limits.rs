//! Resource limits, with defaults sane for a server with thousands of mostly idle clients.

/// Limits applied per server and per connection.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Connections served at once; more are accepted and closed at once.
    pub max_connections: usize,
    /// Requests of one connection being worked on; the connection is not read beyond this.
    pub max_in_flight: usize,
    /// Bytes of sealed replies waiting for a slow reader before the connection is not read.
    pub max_output: usize,
    /// Largest record payload accepted (advertised in the handshake).
    pub max_record: usize,
    /// Time a client has to complete the handshake before the connection is closed.
    pub handshake_timeout: std::time::Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 4096,
            max_in_flight: 32,
            max_output: 4 << 20,
            max_record: protocol::record::DEFAULT_MAX_PAYLOAD,
            handshake_timeout: std::time::Duration::from_secs(10),
        }
    }
}
