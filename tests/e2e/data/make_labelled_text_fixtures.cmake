# Creates the fixtures of the labelled-text importer tests (trainer-data textdir
# and csv) under ROOT, from scratch each time:
#   cmake -DROOT=<dir> -P make_labelled_text_fixtures.cmake
# They are made at test time, not stored, because git keeps neither empty files
# reliably nor dangling symlinks nor empty folders.
if(NOT ROOT)
  message(FATAL_ERROR "ROOT not set")
endif()
file(REMOVE_RECURSE "${ROOT}")

# N plain documents DIR/prefixI.txt with text "TEXT I".
function(docs dir prefix text n)
  math(EXPR last "${n} - 1")
  foreach(i RANGE ${last})
    file(WRITE "${ROOT}/${dir}/${prefix}${i}.txt" "${text} ${i}\n")
  endforeach()
endfunction()

# good/: ham (11, one nested), spam (10 e-mails with headers), a top-level file (skipped).
docs(good/ham h "ham about the meeting" 10)
file(WRITE "${ROOT}/good/ham/sub/deep.txt" "nested ham")
foreach(i RANGE 9)
  file(WRITE "${ROOT}/good/spam/s${i}.txt"
    "From promo@example.com  Mon Aug 26 10:00:00 2002\nReceived: from relay.example.com\n\tby mx.example.com\nSubject: WIN\n money ${i}\nTo: you@example.com\n\nClick here ${i}\n")
endforeach()
file(WRITE "${ROOT}/good/README" "not in a folder: skipped")

# mapped/: four folders for --label FOLDER=CLASS.
docs(mapped/easy-ham-1 e "easy ham" 6)
docs(mapped/hard-ham-1 h "hard ham" 6)
docs(mapped/spam-1 s "spam one" 6)
docs(mapped/spam-2 t "spam two" 6)

# Bad data, each beside enough good documents that only the planted fault fails.
docs(empty_file/ham h "ham" 10)
docs(empty_file/spam s "spam" 10)
file(WRITE "${ROOT}/empty_file/spam/empty.txt" "")
docs(unreadable/ham h "ham" 10)
docs(unreadable/spam s "spam" 10)
file(CREATE_LINK "${ROOT}/unreadable/no_such_target" "${ROOT}/unreadable/spam/broken.txt" SYMBOLIC)
docs(one_class/ham h "ham" 10)

# CSV: header, quoted delimiters, doubled quotes, a line break inside quotes, CRLF.
set(csv "label,text\r\n")
foreach(i RANGE 9)
  string(APPEND csv "ham,plain ham ${i}\r\nspam,\"Win, now ${i}\"\r\n")
endforeach()
string(APPEND csv "ham,\"say \"\"hi\"\"\"\r\nspam,\"line1\nline2\"\r\n\r\n")
file(WRITE "${ROOT}/good.csv" "${csv}")
# TSV with the columns swapped (text first).
set(tsv "")
foreach(i RANGE 9)
  string(APPEND tsv "ok text ${i}\tpos\nbad, text ${i}\tneg\n")
endforeach()
file(WRITE "${ROOT}/good.tsv" "${tsv}")
file(WRITE "${ROOT}/bad_columns.csv" "ham,a\nspam,b\nham,\"multi\nline\"\nspam-without-text\nham,c\n")
file(WRITE "${ROOT}/bad_quote.csv" "ham,a\nspam,b\nham,\"never closed\nspam,d\n")
file(WRITE "${ROOT}/one_label.csv" "ham,a\nham,b\nham,c\n")
