/* A client that connects through rdma_cm and then leaves without disconnecting:
 *   rdmacm_exit ADDR PORT exit    -- exit(1) once ESTABLISHED (an error path's exit)
 *   rdmacm_exit ADDR PORT return  -- main returns 0 with the connection and everything else
 *                                    still open (a program that forgets to clean up)
 * The peer (rping -s) must hear DISCONNECTED: uroce's library tells it on the way out, as the
 * kernel's rdma_cm does when a process's file is closed.
 *   rdmacm_exit ADDR PORT connect -- connects and prints the event that answers (exit 0 for
 *                                    ESTABLISHED, 3 for another)
 *   rdmacm_exit ADDR PORT unread  -- a server that listens, and once a connection request
 *                                    waits in its channel destroys the listener without
 *                                    reading it (then KEEP seconds, argv[4], before it ends):
 *                                    the client must be rejected at once, as by the kernel
 * Linked against rdma-core's librdmacm like any application; the test runs it on uroce's
 * through LD_LIBRARY_PATH. */
#include <netdb.h>
#include <poll.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void die(const char *what) {
  perror(what);
  exit(2);
}

/* Waits for the next event, which must be `want`. */
static void expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want) {
  struct rdma_cm_event *ev;
  if (rdma_get_cm_event(ch, &ev)) die("rdma_get_cm_event");
  if (ev->event != want) {
    fprintf(stderr, "rdmacm_exit: got %s, wanted %s\n", rdma_event_str(ev->event),
            rdma_event_str(want));
    exit(2);
  }
  rdma_ack_cm_event(ev);
}

/* The unread mode: see the top. */
static int leave_unread(struct rdma_event_channel *ch, struct rdma_cm_id *id,
                        struct addrinfo *ai, int keep) {
  if (rdma_bind_addr(id, ai->ai_addr)) die("rdma_bind_addr");
  if (rdma_listen(id, 4)) die("rdma_listen");
  printf("rdmacm_exit: listening\n");
  fflush(stdout);
  struct pollfd p = {.fd = ch->fd, .events = POLLIN};
  if (poll(&p, 1, 30000) != 1) {
    fprintf(stderr, "rdmacm_exit: no connection request in 30 s\n");
    return 2;
  }
  if (rdma_destroy_id(id)) die("rdma_destroy_id");
  printf("rdmacm_exit: listener destroyed with a request unread\n");
  fflush(stdout);
  sleep((unsigned)keep);
  rdma_destroy_event_channel(ch);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: rdmacm_exit ADDR PORT exit|return|connect|unread [KEEP]\n");
    return 2;
  }
  struct addrinfo *ai;
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_flags = !strcmp(argv[3], "unread") ? AI_PASSIVE : 0;
  if (getaddrinfo(argv[1], argv[2], &hints, &ai)) die("getaddrinfo");
  struct rdma_event_channel *ch = rdma_create_event_channel();
  if (!ch) die("rdma_create_event_channel");
  struct rdma_cm_id *id;
  if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) die("rdma_create_id");
  if (!strcmp(argv[3], "unread")) return leave_unread(ch, id, ai, argc > 4 ? atoi(argv[4]) : 10);
  if (rdma_resolve_addr(id, NULL, ai->ai_addr, 2000)) die("rdma_resolve_addr");
  expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
  if (rdma_resolve_route(id, 2000)) die("rdma_resolve_route");
  expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
  struct ibv_qp_init_attr qa;
  memset(&qa, 0, sizeof qa);
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  if (rdma_create_qp(id, NULL, &qa)) die("rdma_create_qp");
  struct rdma_conn_param cp;
  memset(&cp, 0, sizeof cp);
  cp.retry_count = 7;
  cp.rnr_retry_count = 7;
  if (rdma_connect(id, &cp)) die("rdma_connect");
  if (!strcmp(argv[3], "connect")) {
    struct rdma_cm_event *ev;
    if (rdma_get_cm_event(ch, &ev)) die("rdma_get_cm_event");
    printf("rdmacm_exit: %s, status %d\n", rdma_event_str(ev->event), ev->status);
    const int ok = ev->event == RDMA_CM_EVENT_ESTABLISHED;
    rdma_ack_cm_event(ev);
    return ok ? 0 : 3;
  }
  expect(ch, RDMA_CM_EVENT_ESTABLISHED);
  printf("rdmacm_exit: connected, leaving by %s\n", argv[3]);
  fflush(stdout);
  freeaddrinfo(ai);
  if (!strcmp(argv[3], "exit")) exit(1);
  return 0; /* everything left open */
}
