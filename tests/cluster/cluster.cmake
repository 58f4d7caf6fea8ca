# A sharded plan on a real single-node Slurm cluster (scripts/slurm/): munged,
# slurmctld and slurmd started from a scratch folder, a job array and its merge
# job, the result diffed against the unsharded plan. Skipped (exit 77) without
# root or the packages, unless CI=true or KVREPLAY_SLURM_TESTS=1, where that
# fails. Included from tests/CMakeLists.txt.
add_test(NAME plan_slurm_cluster
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/run_slurm_test.sh $<TARGET_FILE:kvreplay>
                 ${PROJECT_SOURCE_DIR})
set_tests_properties(plan_slurm_cluster PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600)
