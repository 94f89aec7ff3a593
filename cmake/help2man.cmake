# Writes a section-1 man page from a program's --help text (and its subcommands').
#   cmake -DPROGRAM=path -DNAME=uroce -DSUMMARY="..." [-DSUBCOMMANDS=run,stats]
#         [-DENVIRONMENT=settings] -DVERSION=x.y.z -DOUT=uroce.1 -P help2man.cmake
# The help text is kept as it is printed (a no-fill block), so it needs no second source.
# What `PROGRAM ARGS...` prints, as no-fill roff text.
function(output_of out)
  execute_process(COMMAND ${PROGRAM} ${ARGN} OUTPUT_VARIABLE text RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${NAME} ${ARGN} exited with ${rc}")
  endif()
  string(REPLACE "\\" "\\e" text "${text}")              # roff's escape character
  string(REGEX REPLACE "(^|\n)([.'])" "\\1\\\\&\\2" text "${text}")  # lines that look like requests
  set(${out} "${text}" PARENT_SCOPE)
endfunction()
function(help_of out)
  output_of(text ${ARGN} --help)
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

help_of(body)
string(CONCAT page ".TH ${NAME} 1 \"\" \"uroce ${VERSION}\" \"User Commands\"\n"
                  ".SH NAME\n${NAME} \\- ${SUMMARY}\n.SH DESCRIPTION\n.nf\n${body}.fi\n")
string(REPLACE "," ";" SUBCOMMANDS "${SUBCOMMANDS}")
foreach(cmd IN LISTS SUBCOMMANDS)
  help_of(body ${cmd})
  string(APPEND page ".SS \"${NAME} ${cmd}\"\n.nf\n${body}.fi\n")
endforeach()
# -DENVIRONMENT=CMD: an ENVIRONMENT section of what `PROGRAM CMD` prints (uroce settings).
if(ENVIRONMENT)
  output_of(env ${ENVIRONMENT})
  string(APPEND page ".SH ENVIRONMENT\n.nf\n${env}.fi\n")
endif()
string(APPEND page ".SH SEE ALSO\nuroce(1), uroce-dissect(1), uroce-replay(1), and the README.md "
                   "installed in share/doc/uroce\n")
file(WRITE ${OUT} "${page}")
