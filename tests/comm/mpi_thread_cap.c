/* An MPI with less thread support than Open MPI's, for the tests of
 * bigbatch's refusals: preloaded (LD_PRELOAD), it caps the thread level
 * that MPI_Init_thread and MPI_Query_thread report at
 * BIGBATCH_TEST_MPI_THREAD_CAP (0 SINGLE .. 3 MULTIPLE), as an MPI built
 * without MPI_THREAD_MULTIPLE, or with no thread support at all, reports
 * it. Open MPI itself still runs at the level asked; only the report
 * changes, which is what bigbatch's checks read (the MPI standard's
 * MPI_Init_thread: a caller may rely only on the level `provided` says).
 *
 * Through the profiling interface (PMPI_*), as MPI tools interpose. */
#include <mpi.h>
#include <stdlib.h>

static int cap(int level) {
  const char* s = getenv("BIGBATCH_TEST_MPI_THREAD_CAP");
  if (s == NULL || *s == '\0') return level;
  const int c = atoi(s);
  return level < c ? level : c;
}

int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  const int rc = PMPI_Init_thread(argc, argv, required, provided);
  if (rc == MPI_SUCCESS) *provided = cap(*provided);
  return rc;
}

int MPI_Query_thread(int* provided) {
  const int rc = PMPI_Query_thread(provided);
  if (rc == MPI_SUCCESS) *provided = cap(*provided);
  return rc;
}
