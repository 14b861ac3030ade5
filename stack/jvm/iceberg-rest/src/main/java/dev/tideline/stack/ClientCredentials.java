package dev.tideline.stack;

import java.io.IOException;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.util.Base64;
import java.util.HashMap;
import java.util.Map;

import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

import jakarta.servlet.Filter;
import jakarta.servlet.FilterChain;
import jakarta.servlet.ServletException;
import jakarta.servlet.ServletRequest;
import jakarta.servlet.ServletResponse;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;

/**
 * OAuth2 client credentials in front of the REST catalog, as a catalog a team runs asks for them
 * (Polaris, Lakekeeper, Unity): {@code POST /v1/oauth/tokens} with the one client id and secret it
 * is given issues a bearer token (and exchanges a valid one for a fresh one: Iceberg's clients
 * refresh theirs); every other request needs a token it issued, else 401 in the REST spec's error
 * form. The reference adapter behind it accepts any client; this is what makes a wrong secret fail.
 * A token is its expiry signed with the client's secret (HMAC-SHA256), as a catalog's JWTs are
 * signed: it holds across a restart of the catalog, which a client's cached token must survive.
 */
final class ClientCredentials implements Filter {
  private static final String TOKENS = "/v1/oauth/tokens";
  private static final long LIFETIME_S = 3600;
  private final String clientId;
  private final byte[] secret;

  ClientCredentials(String clientId, String secret) {
    this.clientId = clientId;
    this.secret = secret.getBytes(StandardCharsets.UTF_8);
  }

  @Override
  public void doFilter(ServletRequest req, ServletResponse res, FilterChain chain)
      throws IOException, ServletException {
    HttpServletRequest request = (HttpServletRequest) req;
    HttpServletResponse response = (HttpServletResponse) res;
    String path = request.getRequestURI();
    if (path.endsWith(TOKENS) && "POST".equals(request.getMethod())) {
      token(request, response);
      return;
    }
    String auth = request.getHeader("Authorization");
    if (auth == null || !auth.startsWith("Bearer ") || !valid(auth.substring("Bearer ".length()))) {
      refuse(response, 401, "NotAuthorizedException", "a bearer token issued by " + TOKENS + " is required");
      return;
    }
    chain.doFilter(req, res);
  }

  private void token(HttpServletRequest request, HttpServletResponse response) throws IOException {
    Map<String, String> form = form(new String(request.getInputStream().readAllBytes(), StandardCharsets.UTF_8));
    String grant = form.getOrDefault("grant_type", "");
    boolean ok;
    if ("client_credentials".equals(grant)) {
      ok = clientId.equals(form.get("client_id"))
          && MessageDigest.isEqual(secret, form.getOrDefault("client_secret", "").getBytes(StandardCharsets.UTF_8));
    } else if ("urn:ietf:params:oauth:grant-type:token-exchange".equals(grant)) {
      String auth = request.getHeader("Authorization");
      ok = valid(form.getOrDefault("subject_token", ""))
          || (auth != null && auth.startsWith("Bearer ") && valid(auth.substring("Bearer ".length())));
    } else {
      ok = false;
    }
    if (!ok) {
      response.setStatus(401);
      response.setContentType("application/json");
      response.getWriter().write("{\"error\": \"invalid_client\", \"error_description\": \"unknown client or secret\"}");
      return;
    }
    String expires = Long.toString(System.currentTimeMillis() / 1000 + LIFETIME_S);
    String token = expires + "." + sign(expires);
    response.setStatus(200);
    response.setContentType("application/json");
    response.getWriter().write("{\"access_token\": \"" + token + "\", \"token_type\": \"bearer\", \"expires_in\": "
        + LIFETIME_S + ", \"issued_token_type\": \"urn:ietf:params:oauth:token-type:access_token\"}");
  }

  private String sign(String expires) {
    try {
      Mac mac = Mac.getInstance("HmacSHA256");
      mac.init(new SecretKeySpec(secret, "HmacSHA256"));
      byte[] sig = mac.doFinal((clientId + ":" + expires).getBytes(StandardCharsets.UTF_8));
      return Base64.getUrlEncoder().withoutPadding().encodeToString(sig);
    } catch (GeneralSecurityException e) {
      throw new IllegalStateException(e);
    }
  }

  /** Signed by this client's secret and not expired. */
  private boolean valid(String token) {
    int dot = token.indexOf('.');
    if (dot <= 0) {
      return false;
    }
    String expires = token.substring(0, dot);
    try {
      if (Long.parseLong(expires) < System.currentTimeMillis() / 1000) {
        return false;
      }
    } catch (NumberFormatException e) {
      return false;
    }
    return MessageDigest.isEqual(sign(expires).getBytes(StandardCharsets.UTF_8),
        token.substring(dot + 1).getBytes(StandardCharsets.UTF_8));
  }

  private static Map<String, String> form(String body) {
    Map<String, String> out = new HashMap<>();
    for (String pair : body.split("&")) {
      int eq = pair.indexOf('=');
      if (eq > 0) {
        out.put(URLDecoder.decode(pair.substring(0, eq), StandardCharsets.UTF_8),
            URLDecoder.decode(pair.substring(eq + 1), StandardCharsets.UTF_8));
      }
    }
    return out;
  }

  private static void refuse(HttpServletResponse response, int code, String type, String message) throws IOException {
    response.setStatus(code);
    response.setContentType("application/json");
    response.getWriter().write("{\"error\": {\"message\": \"" + message + "\", \"type\": \"" + type
        + "\", \"code\": " + code + "}}");
  }
}
