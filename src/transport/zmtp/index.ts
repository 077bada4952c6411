// ZMTP 3.x transport (NULL mechanism) on Bun TCP: PUB, SUB, DEALER, ROUTER. See README.md.
export { PubSocket } from "./pub.ts";
export { SubSocket, type SubOptions } from "./sub.ts";
export { DealerSocket, type DealerOptions } from "./dealer.ts";
export { RouterSocket, type RouterOptions } from "./router.ts";
export { ZmtpSocket, type SocketStats } from "./socket.ts";
export { type ZmtpOptions, type ZmtpEvent, parseEndpoint, reconnectDelayMs } from "./options.ts";
export { ZmtpProtocolError, type SocketType } from "./protocol.ts";
export { ZmtpDecoder, type DecoderSink, type DecoderLimits } from "./decoder.ts";
