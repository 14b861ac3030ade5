package dev.tideline.stack;

import java.util.EnumSet;
import java.util.HashMap;
import java.util.Locale;
import java.util.Map;

import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.rest.RESTCatalogAdapter;
import org.apache.iceberg.rest.RESTCatalogServlet;
import org.eclipse.jetty.ee10.servlet.FilterHolder;
import org.eclipse.jetty.ee10.servlet.ServletContextHandler;
import org.eclipse.jetty.ee10.servlet.ServletHolder;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;

import jakarta.servlet.DispatcherType;

/**
 * The local stack's Iceberg REST catalog: the Iceberg project's own REST catalog servlet and adapter
 * (what its reference server, the apache/iceberg-rest-fixture image, serves) over a backend catalog
 * built from the environment, listening on one address only. The reference server's main binds
 * every interface; the stack's parts listen on loopback.
 *
 * <p>Settings: {@code LAKE_CATALOG_HOST}, {@code LAKE_CATALOG_PORT}, and the backend catalog's
 * properties as {@code CATALOG_<NAME>} variables, the reference server's convention: "__" is a
 * "-", "_" a "." ({@code CATALOG_S3_PATH__STYLE__ACCESS=true} is {@code s3.path-style-access}).
 * Credentials come from the environment (the AWS SDK's), so none is printed. With
 * {@code LAKE_CATALOG_CLIENT_ID} and {@code LAKE_CATALOG_CLIENT_SECRET} set, every request needs an
 * OAuth2 bearer token issued for that client (ClientCredentials).
 */
public final class LakeCatalogServer {
  private LakeCatalogServer() {}

  static Map<String, String> catalogProperties(Map<String, String> env) {
    Map<String, String> props = new HashMap<>();
    for (Map.Entry<String, String> e : env.entrySet()) {
      if (e.getKey().startsWith("CATALOG_")) {
        String key = e.getKey().substring("CATALOG_".length()).toLowerCase(Locale.ROOT)
            .replace("__", "-").replace("_", ".");
        props.put(key, e.getValue());
      }
    }
    props.putIfAbsent(CatalogUtil.ICEBERG_CATALOG_TYPE, CatalogUtil.ICEBERG_CATALOG_TYPE_JDBC);
    props.putIfAbsent("jdbc.schema-version", "V1");   // views too, as the reference server's JDBC backend
    return props;
  }

  public static void main(String[] args) throws Exception {
    Map<String, String> env = System.getenv();
    Map<String, String> props = catalogProperties(env);
    Catalog backend = CatalogUtil.buildIcebergCatalog("lake_backend", props, new Configuration());
    ServletContextHandler context = new ServletContextHandler();
    context.setContextPath("/");
    context.addServlet(new ServletHolder(new RESTCatalogServlet(new RESTCatalogAdapter(backend))), "/*");
    String clientId = env.get("LAKE_CATALOG_CLIENT_ID");
    if (clientId != null && !clientId.isEmpty()) {
      context.addFilter(new FilterHolder(new ClientCredentials(clientId, env.getOrDefault("LAKE_CATALOG_CLIENT_SECRET", ""))),
          "/*", EnumSet.of(DispatcherType.REQUEST));
    }
    Server server = new Server();
    ServerConnector connector = new ServerConnector(server);
    connector.setHost(env.getOrDefault("LAKE_CATALOG_HOST", "127.0.0.1"));
    connector.setPort(Integer.parseInt(env.getOrDefault("LAKE_CATALOG_PORT", "8181")));
    server.addConnector(connector);
    server.setHandler(context);
    server.start();
    System.out.printf("Iceberg REST catalog on http://%s:%d/ over %s, warehouse %s, %s%n", connector.getHost(),
        connector.getPort(), backend.getClass().getSimpleName(), props.get("warehouse"),
        clientId == null || clientId.isEmpty() ? "no authentication" : "OAuth2 client credentials of " + clientId);
    server.join();
  }
}
