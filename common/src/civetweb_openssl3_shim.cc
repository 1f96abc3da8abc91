// Lets Debian's civetweb 1.15 use OpenSSL 3. civetweb loads libssl at run time with
// dlopen("libssl.so") and looks up every function it uses by name, among them
// SSL_get_peer_certificate, which OpenSSL 3 renamed SSL_get1_peer_certificate (same contract:
// the caller frees the certificate). One missing name and civetweb refuses every TLS port.
//
// This library's soname is "libssl.so". http_tls.cc loads it (by its path) before civetweb
// loads OpenSSL; the dynamic loader then answers civetweb's dlopen("libssl.so") with it, as
// an object of that soname is loaded already, and dlsym finds the old name here and every
// other name in libssl.so.3, which it depends on.
#include <openssl/ssl.h>

#undef SSL_get_peer_certificate

extern "C" X509* SSL_get_peer_certificate(const SSL* ssl) { return SSL_get1_peer_certificate(ssl); }
