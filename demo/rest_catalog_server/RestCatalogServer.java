/*
 * An Iceberg REST catalog on 127.0.0.1 for the tests and the demo (demo/rest_catalog.py starts
 * it with `java -cp <jars> RestCatalogServer.java`).
 *
 * The catalog is Apache Iceberg's own REST server side: RESTCatalogServlet and RESTCatalogAdapter
 * (what Iceberg's REST catalog fixture, org.apache.iceberg.rest.RESTCatalogServer, serves) over a
 * JdbcCatalog on a SQLite file, with the tables' files under a local warehouse folder. Around it,
 * two things that fixture leaves out and a production catalog does:
 *
 * - it listens on one address (127.0.0.1), not on every interface;
 * - it checks the caller: with a client id and secret it issues a token at its token endpoint
 *   (any path: a catalog whose identity provider lives elsewhere is one whose clients must be
 *   given oauth2-server-uri), with a token it accepts that bearer token, and every catalog
 *   request without a valid "Authorization: Bearer" header is refused with 401; with a
 *   warehouse name, GET /v1/config refuses any other warehouse (as Polaris and Lakekeeper do).
 *
 * Its settings (secrets included) arrive as one JSON line on standard input, never on a command
 * line or in the environment. It prints "listening <port>" once it serves, and stops when its
 * standard input closes, so it never outlives the process that started it.
 */

import com.fasterxml.jackson.databind.ObjectMapper;
import jakarta.servlet.DispatcherType;
import jakarta.servlet.Filter;
import jakarta.servlet.FilterChain;
import jakarta.servlet.ServletRequest;
import jakarta.servlet.ServletResponse;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.Map;
import java.util.UUID;
import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.jdbc.JdbcCatalog;
import org.apache.iceberg.rest.RESTCatalogAdapter;
import org.apache.iceberg.rest.RESTCatalogServlet;
import org.eclipse.jetty.ee10.servlet.FilterHolder;
import org.eclipse.jetty.ee10.servlet.ServletContextHandler;
import org.eclipse.jetty.ee10.servlet.ServletHolder;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;

public final class RestCatalogServer {
  static final String DEFAULT_TOKEN_PATH = "/v1/oauth/tokens";
  static final ObjectMapper JSON = new ObjectMapper();

  public static void main(String[] args) throws Exception {
    BufferedReader input =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    @SuppressWarnings("unchecked")
    Map<String, String> settings = JSON.readValue(input.readLine(), Map.class);

    Map<String, String> properties = new HashMap<>();
    properties.put(CatalogProperties.CATALOG_IMPL, JdbcCatalog.class.getName());
    properties.put(CatalogProperties.URI, "jdbc:sqlite:" + settings.get("catalog_db"));
    properties.put("jdbc.schema-version", "V1");
    properties.put(CatalogProperties.WAREHOUSE_LOCATION, settings.get("warehouse"));
    Catalog catalog =
        CatalogUtil.buildIcebergCatalog("rest_backend", properties, new Configuration());

    ServletContextHandler context = new ServletContextHandler(ServletContextHandler.NO_SESSIONS);
    context.addServlet(new ServletHolder(new RESTCatalogServlet(new RESTCatalogAdapter(catalog))), "/*");
    context.addFilter(new FilterHolder(new Gate(settings)), "/*", EnumSet.of(DispatcherType.REQUEST));

    Server server = new Server();
    ServerConnector connector = new ServerConnector(server);
    connector.setHost(settings.getOrDefault("host", "127.0.0.1"));
    connector.setPort(Integer.parseInt(settings.getOrDefault("port", "0")));
    server.addConnector(connector);
    server.setHandler(context);
    server.start();
    System.out.println("listening " + connector.getLocalPort());
    System.out.flush();

    while (input.read() != -1) {
      // serve until the starting process closes our standard input (or ends)
    }
    server.stop();
    System.exit(0);
  }

  /** Checks who calls before the catalog sees the request (see the file's comment). */
  static final class Gate implements Filter {
    private final String clientId;
    private final String clientSecret;
    private final String token;
    private final String tokenPath;
    private final String warehouseName;
    private final String issuedToken = "issued-" + UUID.randomUUID();

    Gate(Map<String, String> settings) {
      this.clientId = settings.get("client_id");
      this.clientSecret = settings.get("client_secret");
      this.token = settings.get("token");
      this.tokenPath = settings.getOrDefault("token_path", DEFAULT_TOKEN_PATH);
      this.warehouseName = settings.get("warehouse_name");
    }

    @Override
    public void doFilter(ServletRequest req, ServletResponse res, FilterChain chain)
        throws IOException, jakarta.servlet.ServletException {
      HttpServletRequest request = (HttpServletRequest) req;
      HttpServletResponse response = (HttpServletResponse) res;
      String path = request.getRequestURI();
      if (path.equals(tokenPath) || path.equals(DEFAULT_TOKEN_PATH)) {
        tokenEndpoint(request, response, path);
        return;
      }
      if ((clientId != null || token != null) && !validBearer(request)) {
        catalogError(response, 401, "NotAuthorizedException",
            "no valid bearer token in the Authorization header of " + request.getMethod() + " " + path);
        return;
      }
      if (warehouseName != null && path.equals("/v1/config")
          && !warehouseName.equals(request.getParameter("warehouse"))) {
        catalogError(response, 400, "BadRequestException",
            "this catalog has no warehouse '" + request.getParameter("warehouse")
                + "': its warehouse is '" + warehouseName + "'");
        return;
      }
      chain.doFilter(req, res);
    }

    private boolean validBearer(HttpServletRequest request) {
      String header = request.getHeader("Authorization");
      if (header == null || !header.startsWith("Bearer ")) {
        return false;
      }
      String presented = header.substring("Bearer ".length());
      return presented.equals(token) || (clientId != null && presented.equals(issuedToken));
    }

    private void tokenEndpoint(HttpServletRequest request, HttpServletResponse response, String path)
        throws IOException {
      if (!path.equals(tokenPath) || clientId == null) {
        oauthError(response, 404, "invalid_request",
            "this catalog issues no tokens at " + path
                + (clientId == null ? "" : " (its token endpoint is " + tokenPath + ")"));
        return;
      }
      String grant = request.getParameter("grant_type");
      boolean granted;
      if ("client_credentials".equals(grant)) {
        String[] presented = clientCredentials(request);
        granted = clientId.equals(presented[0]) && clientSecret.equals(presented[1]);
      } else {
        // token exchange and refresh: only for a token this catalog issued
        granted = issuedToken.equals(request.getParameter("subject_token"));
      }
      if (!granted) {
        oauthError(response, 401, "invalid_client", "unknown client or wrong secret");
        return;
      }
      Map<String, Object> body = new HashMap<>();
      body.put("access_token", issuedToken);
      body.put("token_type", "bearer");
      body.put("issued_token_type", "urn:ietf:params:oauth:token-type:access_token");
      write(response, 200, body);
    }

    private static String[] clientCredentials(HttpServletRequest request) {
      String header = request.getHeader("Authorization");
      if (header != null && header.startsWith("Basic ")) {
        String decoded = new String(
            Base64.getDecoder().decode(header.substring("Basic ".length())), StandardCharsets.UTF_8);
        int colon = decoded.indexOf(':');
        if (colon >= 0) {
          return new String[] {decoded.substring(0, colon), decoded.substring(colon + 1)};
        }
      }
      return new String[] {request.getParameter("client_id"), request.getParameter("client_secret")};
    }

    private static void catalogError(HttpServletResponse response, int code, String type, String message)
        throws IOException {
      Map<String, Object> error = new HashMap<>();
      error.put("message", message);
      error.put("type", type);
      error.put("code", code);
      write(response, code, Map.of("error", error));
    }

    private static void oauthError(HttpServletResponse response, int code, String error, String description)
        throws IOException {
      write(response, code, Map.of("error", error, "error_description", description));
    }

    private static void write(HttpServletResponse response, int code, Object body) throws IOException {
      response.setStatus(code);
      response.setContentType("application/json");
      response.getWriter().write(JSON.writeValueAsString(body));
    }
  }
}
