// The catalogue of error codes Tack's services throw: HTTP and gRPC status, retryable default and meaning of each.
export { AREAS, CATALOGUE, errorSpec, isErrorCode, type ErrorCode } from "./catalogue.js";
export { errorsMarkdown } from "./doc.js";
export { GRPC_STATUS_NUMBERS, HTTP_FOR_GRPC, type ErrorSpec, type GrpcStatus, type HttpStatus } from "./spec.js";
