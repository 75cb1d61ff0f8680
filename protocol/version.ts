/** Wire protocol version spoken by this build; `hello.protocol` must equal it (PROTOCOL.md, Handshake). */
export const PROTOCOL_VERSION = 1;
