/*
 * A Spark Connect server interceptor that serves calls from the server's own host only.
 *
 * Spark 3.5's Connect server listens on every interface and has neither a binding-address
 * setting nor authentication. With this class in spark.connect.grpc.interceptor.classes, a call
 * whose peer is not a loopback address is closed with PERMISSION_DENIED before it reaches
 * Spark. scripts/connect_server.py compiles it against the server's own spark-connect jar
 * (whose gRPC is relocated under org.sparkproject.connect.grpc).
 */
package airflow_iceberg_provider.connect;

import java.net.InetSocketAddress;
import java.net.SocketAddress;
import org.sparkproject.connect.grpc.Grpc;
import org.sparkproject.connect.grpc.Metadata;
import org.sparkproject.connect.grpc.ServerCall;
import org.sparkproject.connect.grpc.ServerCallHandler;
import org.sparkproject.connect.grpc.ServerInterceptor;
import org.sparkproject.connect.grpc.Status;

public final class LoopbackOnlyInterceptor implements ServerInterceptor {
  @Override
  public <ReqT, RespT> ServerCall.Listener<ReqT> interceptCall(
      ServerCall<ReqT, RespT> call, Metadata headers, ServerCallHandler<ReqT, RespT> next) {
    SocketAddress remote = call.getAttributes().get(Grpc.TRANSPORT_ATTR_REMOTE_ADDR);
    if (remote instanceof InetSocketAddress) {
      InetSocketAddress inet = (InetSocketAddress) remote;
      if (inet.getAddress() != null && inet.getAddress().isLoopbackAddress()) {
        return next.startCall(call, headers);
      }
    }
    call.close(
        Status.PERMISSION_DENIED.withDescription(
            "this Spark Connect server serves its own host only (127.0.0.1)"),
        new Metadata());
    return new ServerCall.Listener<ReqT>() {};
  }
}
