// Lets Debian's civetweb 1.15 use OpenSSL 3. civetweb loads libssl at run time with
// dlopen("libssl.so") and looks up every function it uses by name, among them
// SSL_get_peer_certificate, which OpenSSL 3 renamed SSL_get1_peer_certificate (same contract:
// the caller frees the certificate). One missing name and civetweb refuses every TLS port.
//
// This library's soname is "libssl.so": loaded with the program (it is linked in), it is what
// civetweb's dlopen("libssl.so") then returns, and dlsym finds the old name here and every
// other name in libssl.so.3, which it depends on.
#include <openssl/ssl.h>

#undef SSL_get_peer_certificate

extern "C" {

X509* SSL_get_peer_certificate(const SSL* ssl) { return SSL_get1_peer_certificate(ssl); }

// Called once by http_tls.cc, so that the linker keeps this library among the program's.
int trainscope_civetweb_openssl3_shim(void) { return 1; }

}  // extern "C"
